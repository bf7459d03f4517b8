"""The no-overhead window model (benchmarks/window_model.py) that the scale section reports beside its share."""

from __future__ import annotations

import math
import random

from capeval.benchmarks.window_model import model_share, model_wall_s


def test_a_constant_latency_server_takes_whole_rounds_of_the_window():
    # sigma 0: every request takes the median, so n requests at a window w take ceil(n / w) rounds exactly
    assert math.isclose(model_wall_s(1000, 100, 0.5, 0.0), 10 * 0.5)
    assert math.isclose(model_wall_s(1001, 100, 0.5, 0.0), 11 * 0.5)
    assert model_share(1000, 100, 0.5, 0.0, seeds=(0,))["share"] == 1.0


def test_without_hedging_the_wall_time_is_the_replayed_queue():
    # the same draws, replayed by hand: w slots, each request starts when the earliest slot frees
    n, w, seed = 300, 16, 7
    rng = random.Random(seed)
    ends = [0.0] * w
    for _ in range(n):
        i = min(range(w), key=ends.__getitem__)
        ends[i] += 0.3 * math.exp(0.8 * rng.gauss(0.0, 1.0))
    assert math.isclose(model_wall_s(n, w, 0.3, 0.8, seed=seed), max(ends))


def test_the_drain_caps_the_share_and_hedging_shortens_it():
    plain = model_share(20_000, 512, 0.3, 0.8)
    hedged = model_share(20_000, 512, 0.3, 0.8, hedge=3)
    assert plain["share"] < 0.9  # the last ~512 requests' lognormal tail, with nothing to fill the slots they free
    assert hedged["share"] > 0.95 > plain["share"]
    assert plain["min"] <= plain["share"] <= plain["max"]
    longer = model_share(80_000, 512, 0.3, 0.8)
    assert longer["share"] > plain["share"]  # the same drain weighs less on a longer run


def test_hedging_needs_a_window_of_answers_and_an_old_enough_request():
    # a run of one window never hedges; a hedge copy waits until its request is older than the median
    assert model_wall_s(64, 64, 0.3, 0.8, hedge=3, seed=1) == model_wall_s(64, 64, 0.3, 0.8, hedge=0, seed=1)
