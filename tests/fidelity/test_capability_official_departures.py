"""CAPability official mode where the adversarial trials found it departing from the official eval.py (issue 19
item 10), through the production path of test_capability_oracle (real items and released captions -> official
pack -> replay judge -> run_judging -> compute_metrics). Rules (shared/protocols/README.md, eval.py @ cebb82a):

* the retry loop checks "at most max_allow_missing (5) items missing" BEFORE its first round (427-468): a task with
  at most 5 items gets no judge call at all, nothing is saved, and calculate_metric of nothing is nan;
* every annotated item needs a caption: the script asserts that captions and annotations cover the same files
  before judging a task, so an item with no caption stops it there (no figure for that task, no average)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.engine.protocols.capability.codes import TASKS


def _oracle_module():
    spec = importlib.util.spec_from_file_location("_capability_oracle_helpers",
                                                  Path(__file__).with_name("test_capability_oracle.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ORACLE = _oracle_module()
SCORED = [c for c in ORACLE.CASES if c["official"]["status"] == "scored" and c["task"] != "dynamic_object_number"]


def _by_task(n: int) -> list[dict] | None:
    """n scored cases of one task, or None when the oracle has no task with that many."""
    tasks = sorted({c["task"] for c in SCORED})
    for task in tasks:
        cases = [c for c in SCORED if c["task"] == task]
        if len(cases) >= n:
            return cases[:n]
    return None


def _metrics(verdicts, cases, captions=None):
    items, _ = ORACLE._tables(cases)
    return ORACLE.compute_metrics(verdicts, items=pl.from_arrow(items),
                                  captions=None if captions is None else pl.from_arrow(captions),
                                  n_resamples=0, mode="official")


def _task_rows(metrics, task):
    return metrics.filter(pl.col("task") == task)


@pytest.mark.parametrize("n", [1, 5])
def test_a_task_of_at_most_max_allow_missing_items_is_not_asked_and_is_nan(n, tmp_path):
    cases = _by_task(n)
    if cases is None:
        pytest.fail(f"the parse oracle has no task with {n} scored cases")
    verdicts = ORACLE._judge(cases, tmp_path)  # the official default max_allow_missing=5
    assert (verdicts["verdict"] == -1).all(), verdicts.select("item_id", "verdict", "error")
    assert verdicts["error"].str.contains("no judge call").all()
    rows = _task_rows(_metrics(verdicts, cases), cases[0]["task"])
    assert rows.height == 4 and rows["value"].is_null().all()
    assert rows["note"].str.contains("max_allow_missing=5").all(), rows["note"].to_list()


def test_a_task_of_more_items_than_max_allow_missing_is_scored(tmp_path):
    cases = _by_task(6)
    if cases is None:
        pytest.fail("the parse oracle has no task with 6 scored cases")
    verdicts = ORACLE._judge(cases, tmp_path)
    assert (verdicts["verdict"] >= 0).all()
    rows = _task_rows(_metrics(verdicts, cases), cases[0]["task"])
    assert rows.filter(pl.col("metric") == "recall")["value"].is_not_null().all()


def test_max_allow_missing_zero_asks_a_single_item(tmp_path):
    cases = _by_task(1)
    verdicts = ORACLE._judge(cases, tmp_path, max_allow_missing=0)
    assert (verdicts["verdict"] >= 0).all()


def _without_caption(cases, tmp_path, how: str):
    """Judge the cases with the caption of the first case's file taken away (`absent`: no caption row; `failed`: a
    caption row whose text is null, as a failed captioning leaves it)."""
    items, captions = ORACLE._tables(cases)
    # the oracle's cases of one task share one file: give each item its own video and caption, so one can lose it
    caption_of = dict(zip(captions["video_id"].to_pylist(), captions.to_pylist()))
    own = [f"{v}@{i}" for i, v in enumerate(items["video_id"].to_pylist())]
    captions = pa.Table.from_pylist(
        [{**caption_of[v], "caption_key": f"cap-{o}", "video_id": o}
         for v, o in zip(items["video_id"].to_pylist(), own)], schema=captions.schema)
    items = items.set_column(items.schema.get_field_index("video_id"), "video_id", pa.array(own, pa.string()))
    gone = own[0]
    keep = pa.array([v != gone for v in captions["video_id"].to_pylist()])
    if how == "absent":
        captions = captions.filter(keep)
    else:
        texts = [t if k else None for t, k in zip(captions["text"].to_pylist(), keep.to_pylist())]
        captions = captions.set_column(captions.schema.get_field_index("text"), "text", pa.array(texts, pa.string()))
    from capeval.adapters.replay import ReplayJudge
    from capeval.engine.judging.runner import run_judging

    judge = ReplayJudge(ORACLE._replies(cases))
    params = {"mode": "official", "prompts": str(ORACLE.PACK_DIR / "capability.toml"), "max_allow_missing": 0}
    requests = ORACLE.PROTOCOL.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                              **params)
    verdicts = run_judging(requests, judge, cache_dir=tmp_path / "cache", protocol=ORACLE.PROTOCOL, progress=False,
                           protocol_params=params)
    return pl.from_arrow(verdicts), items, captions


@pytest.mark.parametrize("with_captions", [True, False])
def test_an_item_without_caption_stops_the_official_script(with_captions, tmp_path):
    """Found from the captions table, or (without it, as `capeval judge` scores) from the judged verdicts: a
    judging run writes a row for every (item, caption) pair, so an item with none had no caption."""
    cases = _by_task(7)
    if cases is None:
        pytest.fail("the parse oracle has no task with 7 scored cases")
    # eval.py judges the tasks in TASKS order and stops at the first uncaptioned one: a task it reached before
    # that keeps its figures (the tasks after it get none: tests/capability/test_capability_official_runs.py)
    reached = set(TASKS[:TASKS.index(cases[0]["task"])])
    other = next(c for c in SCORED if c["task"] in reached)
    verdicts, items, captions = _without_caption(cases + [other], tmp_path, "absent")
    metrics = ORACLE.compute_metrics(verdicts, items=pl.from_arrow(items),
                                     captions=pl.from_arrow(captions) if with_captions else None,
                                     n_resamples=0, mode="official")
    stopped = _task_rows(metrics, cases[0]["task"])
    assert stopped.height == 4 and stopped["value"].is_null().all(), stopped
    assert stopped["note"].str.contains("no caption").all() and stopped["note"].str.contains("AssertionError").all()
    avg = _task_rows(metrics, "avg")
    assert avg["value"].is_null().all() and avg["note"].str.contains("no caption").all(), avg
    kept = _task_rows(metrics, other["task"]).filter(pl.col("metric") == "hit_rate")
    assert kept["value"].is_not_null().all()


def test_a_failed_caption_is_capevals_own_failure_left_out(tmp_path):
    """A caption row with null text (captioning failed: retryable) is not an absent caption: the item is left out
    and counted in n_missing, the task keeps its figures."""
    cases = _by_task(7)
    verdicts, items, captions = _without_caption(cases, tmp_path, "failed")
    metrics = ORACLE.compute_metrics(verdicts, items=pl.from_arrow(items), captions=pl.from_arrow(captions),
                                     n_resamples=0, mode="official")
    row = _task_rows(metrics, cases[0]["task"]).filter(pl.col("metric") == "hit_rate").row(0, named=True)
    assert row["value"] is not None and row["n_missing"] >= 1


def test_released_judgments_with_gaps_are_not_called_uncaptioned(tmp_path):
    """Verdicts that are not a capeval judging run (no request_key: e.g. released judgments) may lack items the
    official run dropped; without captions nothing says those items had no caption."""
    cases = _by_task(7)
    verdicts, items, _ = _without_caption(cases, tmp_path, "absent")
    released = verdicts.select("task", "item_id", "video_id", "captioner", "prompt_id", "frame_spec", "sub_index",
                               "verdict", "parse_status")
    metrics = ORACLE.compute_metrics(released, items=pl.from_arrow(items), n_resamples=0, mode="official")
    row = _task_rows(metrics, cases[0]["task"]).filter(pl.col("metric") == "hit_rate").row(0, named=True)
    assert row["value"] is not None and row["n_missing"] >= 1
