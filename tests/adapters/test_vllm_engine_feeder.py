"""The vLLM captioner's engine thread (adapters/vllm_captioner.py EngineFeeder) against a stand-in engine: a burst of
requests reaching an idle engine goes in whole before its first step (as LLM.generate adds its list), even when the
thread catches up with the burst; a burst announced with its size (`expect`) starts as soon as it is in, without
waiting out a last gap; a steady trickle does not hold the engine back beyond the fill limit; a running engine takes
what arrived between steps."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from types import SimpleNamespace

from capeval.adapters.vllm_captioner import EngineFeeder

STEPS = 3  # steps each stand-in request takes to finish


class _Engine:
    def __init__(self):
        self.running: dict[str, int] = {}  # request number -> steps left
        self.batches: list[int] = []  # requests in the engine at each step
        self.step_times: list[float] = []

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def step(self):
        self.step_times.append(time.perf_counter())
        self.batches.append(len(self.running))
        out = []
        for rid in list(self.running):
            self.running[rid] -= 1
            if self.running[rid] == 0:
                del self.running[rid]
                out.append(SimpleNamespace(request_id=rid, finished=True))
        return out


class _LLM:
    def __init__(self):
        self.llm_engine = _Engine()
        self.count = 0
        self.lock = threading.Lock()

    def enqueue(self, prompts, params, use_tqdm=False):
        with self.lock:
            rid = str(self.count)
            self.count += 1
        self.llm_engine.running[rid] = STEPS
        return [f"{rid}-abc"]


def _submit(feeder: EngineFeeder, n: int, every_s: float) -> list[Future]:
    futures = []
    for i in range(n):
        f: Future = Future()
        feeder.submit({"prompt": str(i)}, None, lambda out, exc, f=f: f.set_result((out, exc)))
        futures.append(f)
        time.sleep(every_s)
    return futures


def test_a_burst_fills_an_idle_engine_before_its_first_step():
    llm = _LLM()
    feeder = EngineFeeder(llm, fill_gap_s=0.5, fill_limit_s=5.0)
    try:
        futures = _submit(feeder, 20, 0.002)  # the thread adds each at once and then finds the inbox empty
        assert all(f.result(timeout=30)[1] is None for f in futures)
    finally:
        feeder.close()
    assert llm.llm_engine.batches[0] == 20  # all twenty in before the first step
    assert feeder.steps == STEPS == len(llm.llm_engine.batches)


def test_without_a_fill_gap_the_first_request_starts_alone():
    llm = _LLM()
    feeder = EngineFeeder(llm)
    try:
        futures = _submit(feeder, 5, 0.05)
        assert all(f.result(timeout=30)[1] is None for f in futures)
    finally:
        feeder.close()
    assert llm.llm_engine.batches[0] < 5  # it stepped before the burst was in (1 unless the machine stalled the thread)


def test_a_trickle_waits_no_longer_than_the_fill_limit():
    llm = _LLM()
    feeder = EngineFeeder(llm, fill_gap_s=0.5, fill_limit_s=0.2)
    try:
        futures = _submit(feeder, 20, 0.05)  # 1 s of arrivals, each within the gap
        assert all(f.result(timeout=30)[1] is None for f in futures)
    finally:
        feeder.close()
    first = llm.llm_engine.batches[0]
    assert 1 < first < 20  # the filling waited for some, then the engine ran while the rest arrived


def test_an_announced_burst_starts_once_it_is_in_without_waiting_out_the_gap():
    llm = _LLM()
    feeder = EngineFeeder(llm, fill_gap_s=2.0, fill_limit_s=10.0)
    try:
        feeder.expect(20)
        futures = _submit(feeder, 20, 0.002)
        last_submit = time.perf_counter()
        assert all(f.result(timeout=30)[1] is None for f in futures)
    finally:
        feeder.close()
    assert llm.llm_engine.batches[0] == 20  # the whole burst in the first step
    assert llm.llm_engine.step_times[0] - last_submit < 1.0  # not after a 2 s gap with nothing coming


def test_a_burst_announced_larger_than_it_came_falls_back_to_the_gap():
    llm = _LLM()
    feeder = EngineFeeder(llm, fill_gap_s=0.3, fill_limit_s=10.0)
    try:
        feeder.expect(5)  # two of its tasks never submit (their frames were unreadable)
        futures = _submit(feeder, 3, 0.002)
        last_submit = time.perf_counter()
        assert all(f.result(timeout=30)[1] is None for f in futures)
    finally:
        feeder.close()
    assert llm.llm_engine.batches[0] == 3
    assert llm.llm_engine.step_times[0] - last_submit >= 0.25  # the gap rule, as without an announcement
