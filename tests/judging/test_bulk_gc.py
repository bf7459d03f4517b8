"""Bulk work runs with fewer garbage-collector passes (engine/gc_thresholds.py) and gives the caller's thresholds
back: a judging run's backend sees the bulk thresholds while it is called, the caller's are restored after, and a
caller that turned collection off or chose a higher threshold keeps its own."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.gc_thresholds import BULK_THRESHOLDS, bulk_gc
from capeval.engine.judging.runner import run_judging
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, conform


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


class _SeesThresholds(ReplayJudge):
    def __init__(self):
        super().__init__([])
        self.seen: set[tuple[int, int, int]] = set()

    def judge(self, requests):
        self.seen.add(gc.get_threshold())
        return super().judge(requests)


def test_a_judging_run_collects_less_often_and_restores_the_callers_thresholds(tmp_path, thresholds):
    gc.set_threshold(700, 10, 10)
    items = conform(pa.table({
        "benchmark": ["capquiz"] * 3, "task": ["count"] * 3, "item_id": [f"v0/q{i}" for i in range(3)],
        "video_id": ["v0"] * 3, "annotation": [f"How many shapes, question {i}?" for i in range(3)],
        "options": [["1", "2", "3", "4", "5"]] * 3, "answer": ["2"] * 3, "category": ["counting"] * 3}), ITEMS)
    captions = conform(pa.table({"caption_key": ["k0"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
                                 "video_id": ["v0"], "text": ["Two shapes move."]}), CAPTIONS)
    protocol = lookup("protocol", "capquiz")
    requests = protocol.build_requests(items, captions, judge="replay", judge_revision="r1", seeds=(0,))
    judge = _SeesThresholds()
    run_judging(requests, judge, cache_dir=tmp_path, protocol=protocol, progress=False)
    assert judge.seen == {BULK_THRESHOLDS}
    assert gc.get_threshold() == (700, 10, 10)


def test_nested_uses_restore_what_each_found(thresholds):
    gc.set_threshold(900, 5, 5)
    with bulk_gc():
        assert gc.get_threshold() == BULK_THRESHOLDS
        with bulk_gc():
            assert gc.get_threshold() == BULK_THRESHOLDS
        assert gc.get_threshold() == BULK_THRESHOLDS
    assert gc.get_threshold() == (900, 5, 5)
    with pytest.raises(RuntimeError), bulk_gc():
        raise RuntimeError("the work failed")
    assert gc.get_threshold() == (900, 5, 5)


@pytest.mark.parametrize("own", [(0, 10, 10), (200_000, 10, 10)])
def test_a_caller_that_chose_otherwise_keeps_its_thresholds(own, thresholds):
    gc.set_threshold(*own)
    with bulk_gc():
        assert gc.get_threshold() == own
    assert gc.get_threshold() == own
