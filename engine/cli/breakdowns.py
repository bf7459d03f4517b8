"""`--by COLUMN[,COLUMN]` for the scoring commands (`capeval score`, `capeval judge`): the flag, the check before
anything expensive runs, and the breakdown rows added to a metrics table and printed (engine/metrics/breakdowns.py;
the tables: engine/report/breakdowns.py; docs/breakdowns.md)."""

from __future__ import annotations

from capeval.engine.errors import UsageError


def add_by_option(p) -> None:
    """`--by COLUMN[,COLUMN]` (score, judge, report): the metrics per level of item attributes too."""
    p.add_argument("--by", metavar="COLUMN[,COLUMN]", type=_by, default=(),
                   help="also the metrics per level of these item attributes: ITEMS columns (task, category, "
                        "media_type, ...), keys of the items' extra JSON (extra.KEY or KEY), duration_bucket, "
                        "n_scenes; each level with its own bootstrap, beside the unsplit rows (by = all)")


def _by(text: str) -> tuple[str, ...]:
    import argparse

    from capeval.engine.metrics.breakdowns import parse_by

    try:
        return parse_by(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_by(by, items, verdicts=None) -> None:
    """A usage error (exit 2) listing the available columns when the items carry no such attribute; called before
    anything expensive (judging) runs."""
    if not by:
        return
    from capeval.engine.frames.decode import probe_duration
    from capeval.engine.metrics.breakdowns import UnknownColumnError, check_columns

    try:
        check_columns(by, _polars(items), _polars(verdicts), media_duration=probe_duration)
    except UnknownColumnError as exc:
        raise UsageError(f"--by: {exc}") from None


def add_breakdowns(metrics, compute, verdicts, by, *, protocol: str, items=None, captions=None,
                   params: dict | None = None, show: bool = True):
    """`metrics` (the unsplit run) with the rows of each `--by` level (engine/metrics/breakdowns.py): `compute`
    (verdicts, items=, captions=) is the computation that made `metrics`. Prints what was left out and, with
    `show`, the breakdown tables with their small-sample warnings."""
    import sys

    from capeval.engine.cli import terminal_text
    from capeval.engine.frames.decode import probe_duration
    from capeval.engine.metrics.breakdowns import UnknownColumnError, with_breakdowns
    from capeval.engine.report.breakdowns import breakdown_tables, format_breakdowns

    if not by:
        return metrics
    try:
        result = with_breakdowns(metrics, compute, _polars(verdicts), by, items=_polars(items),
                                 captions=_polars(captions),
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


def _polars(table):
    import polars as pl

    return table if table is None or isinstance(table, pl.DataFrame) else pl.from_arrow(table)


def metrics_of(protocol, n_resamples: int, params: dict, seed: int = 0):
    """compute(verdicts, items=, captions=) of a registered protocol as the scoring commands run it: its
    compute_metrics with these params, then a reason for every null value (engine/metrics/reasons.py)."""
    from capeval.engine.metrics.reasons import explain_nulls

    def compute(verdicts, items=None, captions=None):
        frame = protocol.compute_metrics(verdicts, items=items, captions=captions, n_resamples=n_resamples,
                                         seed=seed, **params)
        return explain_nulls(frame, verdicts, captions=captions)

    return compute
