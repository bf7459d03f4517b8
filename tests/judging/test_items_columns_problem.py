"""JudgeProtocol.columns_problem finds the items lacking a needed column on the Arrow columns (a Python list of every
item's options was ~50 MB at the peak of a 100,000-item sweep's checks): missing, null, an empty text and an empty
list count as lacking; anything else (a zero, a list of one empty text) does not; the first such item is named."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from capeval.engine.protocols.capquiz import PROTOCOL


def _items(**columns) -> pa.Table:
    n = len(next(iter(columns.values())))
    base = {"item_id": [f"q{k}" for k in range(n)], "annotation": ["Which?"] * n,
            "options": [["a", "b"]] * n, "answer": ["a"] * n}
    return pa.table({**base, **columns})


def test_every_item_with_its_columns_has_no_problem():
    assert PROTOCOL.columns_problem(_items(answer=["a", "b", "0"], options=[["a", "b"], [""], ["0"]])) is None


def test_empty_lists_nulls_and_empty_texts_are_counted_and_the_first_is_named():
    problem = PROTOCOL.columns_problem(_items(options=[["a"], [], None, ["b"], []]))
    assert problem.startswith("it needs `options` in every item; 3 of 5 items have none (e.g. 'q1')"), problem
    problem = PROTOCOL.columns_problem(_items(answer=["a", "b", None, ""]))
    assert "it needs `answer` in every item; 2 of 4 items have none (e.g. 'q2')" in problem, problem


def test_a_missing_column_counts_every_item():
    problem = PROTOCOL.columns_problem(_items(answer=["a", "b"]).drop_columns(["options"]))
    assert "it needs `options` in every item; 2 of 2 items have none (e.g. 'q0')" in problem, problem


def test_polars_strings_and_chunked_columns_are_read_alike():
    table = _items(answer=["a", "", "c", ""])
    from_polars = pl.from_arrow(table).to_arrow()
    chunked = pa.concat_tables([table.slice(0, 2), table.slice(2)])
    expected = "it needs `answer` in every item; 2 of 4 items have none (e.g. 'q1')"
    for t in (from_polars, chunked):
        assert expected in PROTOCOL.columns_problem(t), t.schema
