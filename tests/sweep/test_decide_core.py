"""engine/sweep/decide.py without a sweep: the `[options] decide` table's checks (file, line, field), the rounds,
the pairs a baseline selector plans, and the Decider on a tiny simulated sweep whose effects are known."""

from __future__ import annotations

import numpy as np
import pytest

from capeval.engine.registry import lookup
from capeval.engine.sweep.checker import SweepFileError
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.decide import (ALL_PAIRS, DECIDED, EQUIVALENT, OPEN, Decider, DecideSpec, agrees, metric_span,
                                 metric_statistic, plan_pairs, round_sizes, video_order)


def _sweep_file(tmp_path, decide: str):
    items = tmp_path / "items.jsonl"
    items.write_text('{"item_id": "a", "video_id": "v", "task": "t", "annotation": "q", "options": ["x", "y"], '
                     '"answer": "x"}\n')
    caps = tmp_path / "caps.jsonl"
    caps.write_text('{"video_id": "v", "caption": "x"}\n')
    path = tmp_path / "s.toml"
    path.write_text(f'name = "d"\n[[datasets]]\nname = "q"\nkind = "items"\npath = "{items}"\n[[captions]]\n'
                    f'path = "{caps}"\n[[protocols]]\nname = "capquiz"\n[[judges]]\nname = "local"\n[options]\n'
                    f"decide = {decide}\n")
    return path


def test_the_decide_table_is_read_into_a_spec(tmp_path):
    config = load_sweep(_sweep_file(tmp_path, '{ metric = "CapF1", baseline = "prompt_id=p", delta = 1.5, '
                                              'alpha = 0.1, rounds = 5 }'))
    assert config.options.decide == DecideSpec("CapF1", "prompt_id=p", 1.5, alpha=0.1, rounds=5)
    hash(config.options)  # the options stay hashable


def test_bad_decide_tables_name_the_field_and_line(tmp_path):
    with pytest.raises(SweepFileError) as err:
        load_sweep(_sweep_file(tmp_path, '{ metric = "CapF1", baseline = "all-pairs", delta = -1, alpha = 2, '
                                         'speed = 3 }'))
    text = str(err.value)
    for field in ("options.decide.delta", "options.decide.alpha", "options.decide.speed"):
        assert field in text
    assert "line 13" in text
    with pytest.raises(SweepFileError, match="missing required key 'metric'"):
        load_sweep(_sweep_file(tmp_path, '{ baseline = "all-pairs", delta = 1 }'))


def test_rounds_and_order():
    spec = DecideSpec("m", ALL_PAIRS, 1.0, rounds=4, min_videos=30)
    assert round_sizes(100, spec) == [30, 55, 80, 100]  # the first at least min_videos, then steps of 25
    assert round_sizes(20, spec) == [20]
    order = video_order([f"v{i}" for i in range(50)], seed=3, salt="ds")
    assert sorted(order) == sorted(f"v{i}" for i in range(50)) and order != sorted(order)
    assert order == video_order(reversed([f"v{i}" for i in range(50)]), seed=3, salt="ds")
    assert order != video_order([f"v{i}" for i in range(50)], seed=4, salt="ds")


def test_pairs_of_a_baseline_selector():
    systems = [{"captioner": "a", "prompt_id": "p1", "frame_spec": "f"},
               {"captioner": "a", "prompt_id": "p2", "frame_spec": "f"},
               {"captioner": "b", "prompt_id": "p1", "frame_spec": "f"}]
    assert plan_pairs(systems, "captioner=a,prompt_id=p2") == ([(0, 1), (2, 1)], None)
    assert plan_pairs(systems, "b") == ([(0, 2), (1, 2)], None)
    assert plan_pairs(systems, ALL_PAIRS)[0] == [(0, 1), (0, 2), (1, 2)]
    assert "matches 2 systems" in plan_pairs(systems, "captioner=a")[1]
    assert "matches no system" in plan_pairs(systems, "prompt_id=zz")[1]


def _tiny_sweep(rng, n_videos: int, rates: list[float]):
    """CapQuiz statistics (systems, videos, 1 task, S) of systems answering correctly at `rates` (else wrong), 8
    items per video, through CapQuiz's own paired statistic."""
    import polars as pl

    spec = lookup("protocol", "capquiz").paired_spec("strict")
    rows = []
    for s, rate in enumerate(rates):
        for v in range(n_videos):
            for verdict in np.where(rng.random(8) < rate, 1, 2):
                rows.append({"system": s, "video": v, "verdict": int(verdict)})
    cols = [f"_s{k}" for k in range(spec.n_stats)]
    per = spec.stats(pl.DataFrame(rows), {}).group_by(["system", "video"]).agg(pl.col(cols).sum())
    out = np.zeros((len(rates), n_videos, 1, spec.n_stats))
    out[per["system"].to_numpy(), per["video"].to_numpy(), 0] = per.select(cols).to_numpy()
    return spec, out


def test_decider_on_a_tiny_simulated_sweep():
    rng = np.random.default_rng(0)
    n = 300
    spec, stats = _tiny_sweep(rng, n, [0.5, 0.5, 0.9, 0.1])  # baseline, an equal system, a better, a worse one
    statistic = metric_statistic(spec, "CapF1")
    assert metric_span(statistic, 1, spec.n_stats, spec.scale) == 100.0
    dspec = DecideSpec("CapF1", "prompt_id=base", delta=15.0, rounds=10, min_videos=30)
    decider = Decider(4, [(1, 0), (2, 0), (3, 0)], statistic, n, dspec, span=100.0)
    judged = {}
    for t in round_sizes(n, dspec):
        open_now = decider.open_systems()
        if not open_now:
            break
        for i in open_now:
            judged[i] = t
        decider.update(t, {i: stats[i, :t] for i in open_now})
    equal, better, worse = decider.pairs
    truth = [float(statistic(stats[i].sum(0)[None])[0]) - float(statistic(stats[0].sum(0)[None])[0])
             for i in (1, 2, 3)]
    assert (better.status, better.direction, worse.status, worse.direction) == (DECIDED, 1, DECIDED, -1)
    assert better.early and worse.early and better.videos == worse.videos == 30  # told apart at the first look
    assert equal.status == EQUIVALENT and equal.early and equal.videos < n
    assert all(agrees(p, d, dspec.delta) for p, d in zip(decider.pairs, truth))
    assert all(lo <= d <= hi for p, d in zip(decider.pairs, truth) for _, _, lo, hi in p.history)
    assert max(judged.values()) < n  # nobody judged every video: requests saved


def test_the_last_round_is_the_full_run_itself():
    rng = np.random.default_rng(1)
    spec, stats = _tiny_sweep(rng, 60, [0.5, 0.52])
    statistic = metric_statistic(spec, "CapF1")
    dspec = DecideSpec("CapF1", ALL_PAIRS, delta=0.01, rounds=2, min_videos=30)
    decider = Decider(2, [(0, 1)], statistic, 60, dspec, span=100.0)
    decider.update(30, {0: stats[0, :30], 1: stats[1, :30]})
    pair = decider.pairs[0]
    assert pair.status == OPEN  # a 2-point gap on 30 videos: neither excluded nor within 0.01
    decider.update(60, {0: stats[0], 1: stats[1]})
    truth = float(statistic(stats[0].sum(0)[None])[0] - statistic(stats[1].sum(0)[None])[0])
    assert pair.low == pair.high == pair.estimate == pytest.approx(truth) and not pair.early
    assert pair.status == DECIDED and pair.direction == np.sign(truth)
