"""What a protocol hands `capeval compare` (engine.report.compare): how its verdict rows become per-video statistics
and which functions of their sums are its headline metrics. A protocol returns one from `paired_spec(mode)`
(engine.protocols.base.JudgeProtocol); the comparison itself knows no protocol.

The statistics are sums, so the paired bootstrap can resample videos by summing rows: per (video, task) the spec's
columns `_s0.._s{n_stats-1}` are added up, and each metric is a vectorised function of those sums (..., n_stats).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl


@dataclass(frozen=True)
class PairedSpec:
    """How one protocol's verdicts become per-video statistics (V, T, S) and headline metrics of their sums."""

    stats: Callable[[pl.DataFrame, dict], pl.DataFrame]  # rows -> rows with _task and stat columns _s0.._sk
    n_stats: int
    metrics: dict[str, Callable[[np.ndarray], np.ndarray]]  # sums (..., S) -> values (...)
    scale: float = 100.0


def code_stats(n_codes: int, steps_out: tuple[str, ...] = ()):
    """One-hot code columns (the last one: no verdict) per row; optionally without some judge steps. This is the
    statistic of every protocol whose metrics are functions of verdict-code counts (engine.metrics.core)."""

    def stats(v: pl.DataFrame, opts: dict) -> pl.DataFrame:
        if steps_out and "step" in v.columns:
            v = v.filter(pl.col("step").is_null() | ~pl.col("step").is_in(list(steps_out)))
        code = pl.when((pl.col("verdict") >= 0) & (pl.col("verdict") < n_codes)).then(pl.col("verdict")).otherwise(
            n_codes)
        return v.with_columns([(code == k).cast(pl.Float64).alias(f"_s{k}") for k in range(n_codes + 1)])

    return stats
