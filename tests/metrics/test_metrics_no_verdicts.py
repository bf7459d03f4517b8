"""A failure is never a number (issue 16): metrics of a group without a single verdict are null in every protocol's
metrics, `explain_nulls` says why ("no verdicts: <first error> (xN)", captions that match no item), the terminal
tables print the reason, and F1 of P = R = 0 follows each protocol's rule and is shown."""

import importlib

import polars as pl
import pytest

from capeval.engine.metrics.reasons import explain_nulls
from capeval.engine.report.metrics_text import format_rows
from capeval.engine.report.leaderboard import format_leaderboard, leaderboard

BASE = dict(captioner="m", prompt_id="p", frame_spec="f", judge="j")
REFUSED = "failed after 2 attempts: APIConnectionError: Cannot connect to host 127.0.0.1:9 [Connection refused]"


def _table(rows, error=REFUSED) -> pl.DataFrame:
    """Verdict rows: each dict's verdict (-1: none, parse_status ERROR with `error`), the shared group columns."""
    out = [{**BASE, "parse_status": 0 if r["verdict"] >= 0 else 3, "error": None if r["verdict"] >= 0 else error,
            **r} for r in rows]
    return pl.DataFrame(out, schema_overrides={"verdict": pl.Int8, "parse_status": pl.Int8, "sub_index": pl.Int32,
                                               "trial": pl.Int16})


def _all_failed(protocol: str) -> pl.DataFrame:
    if protocol == "lvcap":
        return _table([dict(task="lvcap", item_id=f"v{i}", video_id=f"v{i}", step=s, sub_index=k, verdict=-1)
                       for i in range(2) for s in ("entail_p", "entail_r", "scene") for k in range(2)])
    if protocol == "capability":
        return _table([dict(task=t, item_id=f"{t}{i}", video_id=f"v{i}", verdict=-1)
                       for t in ("scene", "OCR") for i in range(7)])
    extra = {"step": "score", "trial": 0} if protocol == "vidcapbench" else {}
    return _table([dict(task=protocol, item_id=f"q{i}", video_id=f"v{i % 2}", verdict=-1, **extra)
                   for i in range(4)])


@pytest.mark.parametrize("mode", ["strict", "official"])
@pytest.mark.parametrize("protocol", ["capquiz", "capability", "lvcap", "vidcapbench", "vcinspector"])
def test_every_protocols_metrics_of_a_judge_that_never_answered_are_null(protocol, mode):
    metrics = importlib.import_module(f"capeval.engine.protocols.{protocol}.metrics")
    verdicts = _all_failed(protocol)
    frame = metrics.compute_metrics(verdicts, n_resamples=20, mode=mode)
    assert frame.height
    numeric = frame.filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
    assert numeric.is_empty(), numeric  # strict CapR, VC-Inspector shares, LVCap S_s, ... were 0.0 here
    explained = explain_nulls(frame, verdicts)
    assert explained["value"].is_null().all() and explained["ci_low"].is_null().all()
    # the rows behind each metric row: all of them, or one CAPability task's (7 of 14)
    expected = {f"no verdicts: {REFUSED} (x{n})" for n in ((7, 14) if protocol == "capability" else
                                                          (verdicts.height,))}
    assert set(explained["reason"]) == expected


def test_only_the_group_without_verdicts_is_nulled_and_the_first_error_is_named_with_its_count():
    rows = [dict(task="capquiz", item_id=f"q{i}", video_id=f"v{i}", verdict=1, captioner="good") for i in range(3)]
    rows += [dict(task="capquiz", item_id=f"q{i}", video_id=f"v{i}", verdict=-1, captioner="down") for i in range(3)]
    verdicts = _table(rows)
    verdicts = verdicts.with_columns(
        pl.when(pl.col("item_id") == "q2").then(pl.lit("timeout after 30 s")).otherwise(pl.col("error")).alias("error"))
    metrics = importlib.import_module("capeval.engine.protocols.capquiz.metrics")
    frame = explain_nulls(metrics.compute_metrics(verdicts, n_resamples=0), verdicts)
    good = frame.filter(pl.col("captioner") == "good")
    assert good["value"].is_not_null().all() and good["reason"].is_null().all()
    down = frame.filter(pl.col("captioner") == "down")
    assert down["value"].is_null().all()
    assert set(down["reason"]) == {f"no verdicts: {REFUSED} (x2; 1 more rows failed otherwise)"}


def test_items_without_a_caption_say_whether_the_captions_matched_no_item():
    verdicts = _table([dict(task="capquiz", item_id=f"q{i}", video_id=f"v{i}", verdict=-1) for i in range(3)],
                      error="no caption for item 'q0' (video 'v0') in caps.jsonl").with_columns(
        pl.lit("no_caption").alias("item_status"))
    metrics = importlib.import_module("capeval.engine.protocols.capquiz.metrics").compute_metrics(verdicts, n_resamples=0)
    some = pl.DataFrame({"video_id": ["x0", "x1"], "text": ["a caption", "another"]})
    none = pl.DataFrame({"video_id": ["v0"], "text": [None]}, schema={"video_id": pl.String, "text": pl.String})
    assert set(explain_nulls(metrics, verdicts, captions=some)["reason"]) == {
        "no verdicts: item ids match no caption (x3)"}
    assert set(explain_nulls(metrics, verdicts, captions=none)["reason"]) == {
        "no verdicts: no caption for any item (x3)"}


def test_terminal_tables_print_the_reason_not_a_number():
    verdicts = _all_failed("capquiz")
    frame = explain_nulls(importlib.import_module("capeval.engine.protocols.capquiz.metrics").compute_metrics(
        verdicts, n_resamples=0), verdicts)
    reason = f"no verdicts: {REFUSED} (x4)"
    rows = format_rows(frame)
    assert rows.splitlines()[0].split()[-1] == "reason" and reason in rows
    assert "0.00" not in rows
    board = format_leaderboard(leaderboard(frame, "capquiz"))
    first = board.splitlines()[3]  # the system's row under the title, header and rule
    assert first.count("no verdicts!") == 3 and "0.0" not in first
    assert f"! m p f CapF1, CapP, CapR: {reason}" in board


# -- F1 of P = R = 0 (verdicts present, none right) follows each protocol's rule and is shown ---------------------


def test_capquiz_f1_of_zero_precision_and_recall_is_zero():
    """The paper leaves 0/0 open; capeval scores it 0 (its per-video F1, 2TP/(N+TP+FP), is 0 there too)."""
    from capeval.engine.protocols.capquiz.paired import paired_spec

    verdicts = _table([dict(task="capquiz", item_id=f"q{i}", video_id=f"v{i}", verdict=2) for i in range(4)])  # WRONG
    metrics = importlib.import_module("capeval.engine.protocols.capquiz.metrics")
    for average in ("pooled", "per_video"):
        frame = explain_nulls(metrics.compute_metrics(verdicts, n_resamples=20, average=average), verdicts)
        values = dict(zip(frame["metric"], frame["value"]))
        assert values == {"CapP": 0.0, "CapR": 0.0, "CapF1": 0.0}, average
        assert frame["reason"].is_null().all()
    counts = pl.Series([[0, 0, 4, 0]]).list.to_array(4).to_numpy().astype(float)  # CD, TP, FP, NV
    assert paired_spec("strict").metrics["CapF1"](counts)[0] == 0.0  # compare uses the same rule
    # only verdicts that state nothing: CapP is 0/0, so CapF1 stays undefined, and says so
    cd = _table([dict(task="capquiz", item_id=f"q{i}", video_id=f"v{i}", verdict=0) for i in range(4)])
    frame = explain_nulls(metrics.compute_metrics(cd, n_resamples=0), cd)
    f1 = frame.filter(pl.col("metric") == "CapF1").row(0, named=True)
    assert f1["value"] is None and f1["reason"].startswith("undefined")


def test_capability_f1_of_zero_precision_and_recall_is_nan_as_officially_and_shown_with_its_reason():
    """The official calculate_metric gives nan for "hits but no correct answer" (P = R = 0)."""
    verdicts = _table([dict(task="scene", item_id=f"s{i}", video_id=f"v{i}", verdict=c)
                       for i, c in enumerate([2, 0, 2, 0, 2, 0, 2])])  # NEGATIVE / MISS
    metrics = importlib.import_module("capeval.engine.protocols.capability.metrics")
    frame = explain_nulls(metrics.compute_metrics(verdicts, n_resamples=0, mode="official"), verdicts)
    scene = {r["metric"]: r for r in frame.filter(pl.col("task") == "scene").iter_rows(named=True)}
    assert scene["precision"]["value"] == 0.0 and scene["recall"]["value"] == 0.0
    assert scene["f1"]["value"] is None and "both are 0" in scene["f1"]["reason"]
    board = format_leaderboard(leaderboard(frame.filter(pl.col("task") == "scene"), "capability"))
    assert "undefined!" in board and "both are 0" in board  # shown, not a bare "-"


def test_lvcap_event_f1_of_zero_precision_and_recall_is_undefined_as_autodq_and_says_so():
    """AutoDQ's count_f1 (which LVCap-Eval's S_e adopts) is nan when R + P = 0."""
    verdicts = _table([dict(task="lvcap", item_id=f"v{i}", video_id=f"v{i}", step=s, sub_index=k, verdict=0)
                       for i in range(2) for s in ("entail_p", "entail_r") for k in range(2)])  # all neutral
    metrics = importlib.import_module("capeval.engine.protocols.lvcap.metrics")
    frame = explain_nulls(metrics.compute_metrics(verdicts, n_resamples=0), verdicts)
    row = {r["metric"]: r for r in frame.filter(pl.col("bucket") == "all").iter_rows(named=True)}
    assert row["event_precision"]["value"] == 0.0 and row["event_recall"]["value"] == 0.0
    assert row["S_e"]["value"] is None and row["S_e"]["reason"].startswith("undefined")


def test_verdicts_with_a_verdict_on_every_row_are_not_grouped_again(monkeypatch):
    """No group can be without a verdict when every row has one: explain_nulls reads that off the verdict column
    and leaves the metrics' reasons as they are, without the polars copy of the verdict table and its grouping
    (at a 100,000-row cell's end, the run's peak RSS: issue 30). A row without one still goes the whole way."""
    import pyarrow as pa

    from capeval.engine.metrics import reasons

    metrics = pl.DataFrame({"task": ["a", "b"], "metric": ["acc", "acc"], "value": [0.5, None], "n": [2, 0]})
    judged = pa.table({"task": ["a", "a", "b"], "verdict": pa.array([1, 0, 2], pa.int8()),
                       "parse_status": pa.array([0, 0, 0], pa.int8()), "error": pa.array([None] * 3, pa.string())})
    calls = []
    original = reasons._no_verdict_rows
    monkeypatch.setattr(reasons, "_no_verdict_rows", lambda *a: calls.append(1) or original(*a))
    for verdicts in (judged, pl.from_arrow(judged)):
        out = reasons.explain_nulls(metrics, verdicts)
        assert out["reason"].to_list() == [None, "no verdict in this group"] and calls == []
    from capeval.engine.schemas import NO_VERDICT, ParseStatus

    unjudged = judged.set_column(1, "verdict", pa.array([1, 0, NO_VERDICT], pa.int8())).set_column(
        2, "parse_status", pa.array([0, 0, int(ParseStatus.FAILED)], pa.int8()))
    out = reasons.explain_nulls(metrics, unjudged)
    assert calls == [1] and out["reason"][1].startswith("no verdicts: ")
