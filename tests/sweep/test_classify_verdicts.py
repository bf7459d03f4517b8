"""engine/sweep/accounting.py classify_verdicts: a cell whose rows all have a verdict is classified without a Python
pass over its rows, to the same table the row-by-row pass gives; a cell with any row without a verdict (or a null
verdict) still gets each row's status and reason."""

from __future__ import annotations

import pyarrow as pa

from capeval.engine.schemas import NO_VERDICT, ParseStatus
from capeval.engine.sweep.accounting import (JUDGE_ERROR, MISSING, OK, UNPARSED, Failure, classify_verdicts)


def _verdicts(verdict: list, parse: list, error: list) -> pa.Table:
    n = len(verdict)
    return pa.table({"item_id": [f"v{i}/q" for i in range(n)], "video_id": [f"v{i}" for i in range(n)],
                     "verdict": pa.array(verdict, pa.int8()), "parse_status": pa.array(parse, pa.int8()),
                     "error": pa.array(error, pa.string())})


def test_all_rows_with_a_verdict_are_ok_and_keep_their_errors():
    t = _verdicts([1, 0, 1], [0, 0, 0], [None, "a re-ask was needed", None])
    got = classify_verdicts(t, {})
    assert got.column("item_status").to_pylist() == [OK, OK, OK]
    assert got.column("retryable").to_pylist() == [False, False, False]
    assert got.column("error").to_pylist() == [None, "a re-ask was needed", None]
    assert got.schema.field("item_status").type == pa.string() and got.schema.field("retryable").type == pa.bool_()
    assert got.select(t.column_names).equals(t)


def test_an_empty_cell_gets_the_columns():
    got = classify_verdicts(_verdicts([], [], []), {})
    assert got.num_rows == 0 and got.column_names[-2:] == ["item_status", "retryable"]


def test_rows_without_a_verdict_get_their_status_and_the_failure_message():
    failure = Failure("bad_media", "no frames", "the video has no frames")
    failures = {"v3": failure}
    t = _verdicts([1, NO_VERDICT, NO_VERDICT, NO_VERDICT, NO_VERDICT],
                  [0, int(ParseStatus.FAILED), int(ParseStatus.ERROR), 0, 0], [None, "x", "y", None, None])
    got = classify_verdicts(t, failures)
    status = got.column("item_status").to_pylist()
    assert status == [OK, UNPARSED, JUDGE_ERROR, "bad_media", MISSING]
    assert got.column("error").to_pylist() == [None, "x", "y", "the video has no frames", None]
    assert got.column("retryable").to_pylist()[0] is False


def test_a_null_verdict_is_classified_row_by_row_as_before():
    t = _verdicts([1, None], [0, 0], [None, None])
    got = classify_verdicts(t, {})
    assert got.column("item_status").to_pylist() == [OK, OK]  # None != NO_VERDICT: the row pass counts it ok
