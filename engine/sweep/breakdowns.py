"""A sweep cell's metrics broken down by `[options] breakdowns` (engine/metrics/breakdowns.py): the protocol's
metrics on each level of each item attribute, computed as the cell's own metrics are (the same params, resamples
and seed), beside them in the cell's metrics segment and so in results.parquet. A column this cell's items do not
carry is skipped with a note in the log (datasets of one sweep carry different attributes); a cell committed
before the option was set keeps its rows (`capeval report RUN --by COLUMN` computes them from its verdicts)."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from capeval.engine.frames.decode import probe_duration
from capeval.engine.metrics.breakdowns import with_breakdowns
from capeval.engine.metrics.reasons import explain_nulls


def cell_breakdowns(metrics: pl.DataFrame, protocol, verdicts: pa.Table, by, *, items: pa.Table,
                    captions: pa.Table | None, n_resamples: int, metric_params: dict, duration_buckets=None,
                    log=None, label: str = "") -> pl.DataFrame:
    """`metrics` (the cell's unsplit metrics: compute_metrics with `metric_params`, `n_resamples`, seed 0, then
    explain_nulls) with the breakdown rows, each level computed the same way on its verdicts and items."""
    def compute(v: pl.DataFrame, items=None, captions=None) -> pl.DataFrame:
        scored = v.drop([c for c in ("item_status", "retryable") if c in v.columns])
        frame = protocol.compute_metrics(scored, items=items, captions=captions, n_resamples=n_resamples, seed=0,
                                         **metric_params)
        return explain_nulls(frame, v, captions=captions)

    result = with_breakdowns(metrics, compute, pl.from_arrow(verdicts), by, items=pl.from_arrow(items),
                             captions=None if captions is None else pl.from_arrow(captions),
                             duration_buckets=duration_buckets, media_duration=probe_duration, on_unknown="skip")
    for note in result.notes:
        if log is not None:
            log(f"note: breakdowns{' ' + label if label else ''}: {note}")
    return result.frame
