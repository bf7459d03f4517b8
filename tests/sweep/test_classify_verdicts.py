"""A cell's verdicts accounted for (engine/sweep/accounting.py classify_verdicts): every row gets its item_status
and retryable flag, a row without a verdict because its video or caption failed gets that failure's message;
only the rows without a verdict are made into Python values (issue 30's scale RSS: every row's ids were ~20 MB at
a 100,000-row cell, left in the interpreter's arenas through the cell's end)."""

from __future__ import annotations

import tracemalloc

import pyarrow as pa

from capeval.engine.schemas import NO_VERDICT, ParseStatus
from capeval.engine.sweep import accounting
from capeval.engine.sweep.accounting import Failure

SCHEMA = pa.schema([("item_id", pa.string()), ("video_id", pa.string()), ("verdict", pa.int8()),
                    ("parse_status", pa.int8()), ("error", pa.string())])


def test_each_row_is_classified_and_a_failed_video_explains_its_rows():
    ok, failed, error = int(ParseStatus.OK), int(ParseStatus.FAILED), int(ParseStatus.ERROR)
    rows = [("i0", "v0", 1, ok, None), ("i1", "v0", NO_VERDICT, failed, None), ("i2", "v1", NO_VERDICT, error, "boom"),
            ("i3", "v2", NO_VERDICT, ok, "caption failed: x"), ("i4", "v3", NO_VERDICT, ok, None),
            ("i5", "v3", None, ok, None)]
    verdicts = pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)
    failures = {"v2": Failure(accounting.NO_CAPTION, "no caption", "no caption for item 'i3'")}
    out = accounting.classify_verdicts(verdicts, failures)
    assert out.column("item_status").to_pylist() == [accounting.OK, accounting.UNPARSED, accounting.JUDGE_ERROR,
                                                      accounting.NO_CAPTION, accounting.MISSING, accounting.OK]
    assert out.column("error").to_pylist() == [None, None, "boom", "no caption for item 'i3'", None, None]
    assert out.column("retryable").to_pylist() == [s in accounting.RETRYABLE
                                                   for s in out.column("item_status").to_pylist()]
    assert out.schema.names == SCHEMA.names + ["item_status", "retryable"]


def test_a_big_cell_is_classified_without_a_python_value_per_row():
    n = 20_000
    verdicts = pa.table({"item_id": [f"v{k // 4:06d}/{k % 4}" for k in range(n)],
                         "video_id": [f"v{k // 4:06d}" for k in range(n)],
                         "verdict": pa.array([k % 3 for k in range(n)], pa.int8()),
                         "parse_status": pa.array([int(ParseStatus.OK)] * n, pa.int8()),
                         "error": pa.array([None] * n, pa.string())})
    accounting.classify_verdicts(verdicts.slice(0, 10), {})  # first-call set-up outside the measure
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = accounting.classify_verdicts(verdicts, {})
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert set(out.column("item_status").to_pylist()) == {accounting.OK}
    assert peak < 500_000, f"classify_verdicts held {peak / 1e6:.1f} MB of Python objects for 20,000 rows"


def test_rows_that_all_have_a_verdict_keep_their_errors_and_types():
    verdicts = pa.Table.from_pylist([{"item_id": "i0", "video_id": "v0", "verdict": 1, "parse_status": 0,
                                      "error": None},
                                     {"item_id": "i1", "video_id": "v0", "verdict": 0, "parse_status": 0,
                                      "error": "a re-ask was needed"}], schema=SCHEMA)
    out = accounting.classify_verdicts(verdicts, {})
    assert out.column("item_status").to_pylist() == [accounting.OK, accounting.OK]
    assert out.column("retryable").to_pylist() == [False, False]
    assert out.select(SCHEMA.names).equals(verdicts)
    assert out.schema.field("item_status").type == pa.string() and out.schema.field("retryable").type == pa.bool_()


def test_an_empty_cell_gets_the_columns():
    out = accounting.classify_verdicts(SCHEMA.empty_table(), {})
    assert out.num_rows == 0 and out.column_names[-2:] == ["item_status", "retryable"]


def test_a_cell_holds_only_the_verdict_columns_its_metrics_read_once_its_rows_are_written():
    """CapQuiz declares the columns its metrics read; the cell's end keeps those and the status columns the
    metrics' reasons read (engine/metrics/reasons.py), and a protocol that declares none keeps every column."""
    from capeval.engine.registry import lookup
    from capeval.engine.schemas import VERDICTS
    from capeval.engine.sweep.judge_stage import _read_by_metrics

    table = VERDICTS.empty_table().append_column("item_status", pa.array([], pa.string()))
    capquiz = lookup("protocol", "capquiz")
    kept = _read_by_metrics(capquiz, table)
    assert set(capquiz.metric_columns["verdicts"]) <= set(kept)
    assert {"parse_status", "error", "item_status"} <= set(kept)
    assert not {"request_key", "raw_output", "detail", "latency_s"} & set(kept)
    assert _read_by_metrics(lookup("protocol", "vidcapbench"), table) == table.column_names
