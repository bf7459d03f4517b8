"""What a protocol hands `capeval compare` (capeval.engine.report.compare): how its verdict rows become per-video statistics
and which functions of their sums are its headline metrics. A protocol returns one from `paired_spec(mode)`
(capeval.engine.protocols.base.JudgeProtocol); the comparison itself knows no protocol.

The statistics are sums, so the paired bootstrap can resample videos by summing rows: per (video, task) the spec's
columns `_s0.._s{n_stats-1}` are added up, and each metric is a vectorised function of those sums (..., n_stats).
"""

from __future__ import annotations

import warnings
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
    statistic of every protocol whose metrics are functions of verdict-code counts (capeval.engine.metrics.core)."""

    def stats(v: pl.DataFrame, opts: dict) -> pl.DataFrame:
        if steps_out and "step" in v.columns:
            v = v.filter(pl.col("step").is_null() | ~pl.col("step").is_in(list(steps_out)))
        code = pl.when((pl.col("verdict") >= 0) & (pl.col("verdict") < n_codes)).then(pl.col("verdict")).otherwise(
            n_codes)
        return v.with_columns([(code == k).cast(pl.Float64).alias(f"_s{k}") for k in range(n_codes + 1)])

    return stats


def per_video_stats(rows: pl.DataFrame, spec: PairedSpec, videos: list[str], tasks: list[str]) -> np.ndarray:
    """(V, T, S) float64 sums of the spec's statistics per (video, `_task` column of `rows`), in the given orders;
    rows of other videos or tasks are left out."""
    stats = spec.stats(rows, {})
    cols = [f"_s{k}" for k in range(spec.n_stats)]
    agg = stats.group_by(["video_id", "_task"]).agg(pl.col(cols).sum())
    v_idx = agg["video_id"].replace_strict(videos, list(range(len(videos))), default=-1).to_numpy()
    t_idx = agg["_task"].replace_strict(tasks, list(range(len(tasks))), default=-1).to_numpy()
    keep = (v_idx >= 0) & (t_idx >= 0)
    out = np.zeros((len(videos), len(tasks), spec.n_stats))
    np.add.at(out, (v_idx[keep], t_idx[keep]), agg.select(cols).to_numpy()[keep])
    return out


def task_mean_values(spec: PairedSpec, sums: np.ndarray, metrics) -> np.ndarray:
    """(..., T, S) sums -> (..., M) values of `metrics` (names in spec.metrics): the mean over the tasks where the
    metric is defined, on the spec's scale; nan where it is undefined in every task (a 0/0)."""
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of all-nan: the metric is undefined there
        vals = np.stack([np.asarray(spec.metrics[m](sums), dtype=np.float64) for m in metrics], axis=-1)
        return np.nanmean(vals, axis=-2) * spec.scale
