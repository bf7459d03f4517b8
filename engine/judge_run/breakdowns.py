"""`--by COLUMN[,COLUMN]` of the scoring commands (`capeval score`, `capeval judge`): the check before anything
expensive runs, and the breakdown rows added to a metrics table and printed (engine/metrics/breakdowns.py; the
tables: engine/report/breakdowns.py; docs/breakdowns.md). The flag itself: engine/cli/breakdowns.py."""

from __future__ import annotations

import sys

import polars as pl

from capeval.engine.errors import UsageError
from capeval.engine.frames.decode import probe_duration
from capeval.engine.metrics.breakdowns import UnknownColumnError, check_columns, with_breakdowns
from capeval.engine.metrics.reasons import explain_nulls
from capeval.engine.report.breakdowns import breakdown_tables, format_breakdowns
from capeval.engine.safetext import terminal_text


def check_by(by, items, verdicts=None) -> None:
    """A usage error (exit 2) listing the available columns when the items carry no such attribute; called before
    anything expensive (judging) runs."""
    if not by:
        return
    try:
        check_columns(by, as_polars(items), as_polars(verdicts), media_duration=probe_duration)
    except UnknownColumnError as exc:
        raise UsageError(f"--by: {exc}") from None


def add_breakdowns(metrics, compute, verdicts, by, *, protocol: str, items=None, captions=None,
                   params: dict | None = None, show: bool = True):
    """`metrics` (the unsplit run) with the rows of each `--by` level (engine/metrics/breakdowns.py): `compute`
    (verdicts, items=, captions=) is the computation that made `metrics`. Prints what was left out and, with
    `show`, the breakdown tables with their small-sample warnings."""
    if not by:
        return metrics
    try:
        result = with_breakdowns(metrics, compute, as_polars(verdicts), by, items=as_polars(items),
                                 captions=as_polars(captions),
                                 duration_buckets=(params or {}).get("duration_buckets"),
                                 media_duration=probe_duration)
    except UnknownColumnError as exc:
        raise UsageError(f"--by: {exc}") from None
    for note in result.notes:
        print(f"[by] {note}", file=sys.stderr)
    if show:
        text = format_breakdowns(breakdown_tables(result.frame, protocol=protocol))
        if text:
            print(terminal_text(text))
    return result.frame


def as_polars(table):
    """A pyarrow table as a Polars frame (a frame or None as it is)."""
    return table if table is None or isinstance(table, pl.DataFrame) else pl.from_arrow(table)


def metrics_of(protocol, n_resamples: int, params: dict, seed: int = 0):
    """compute(verdicts, items=, captions=) of a registered protocol as the scoring commands run it: its
    compute_metrics with these params, then a reason for every null value (engine/metrics/reasons.py)."""

    def compute(verdicts, items=None, captions=None):
        frame = protocol.compute_metrics(verdicts, items=items, captions=captions, n_resamples=n_resamples,
                                         seed=seed, **params)
        return explain_nulls(frame, verdicts, captions=captions)

    return compute
