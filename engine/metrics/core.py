"""Generic metrics layer shared by every protocol: verdict codes -> count tables -> metrics with cluster CIs.

A protocol turns its verdicts into a `CountTable` (per video, per group, per code) once, then names its metrics
as vectorised functions of counts (..., n_codes + 1) -- the last column is NO_VERDICT -- and `metrics_frame`
evaluates them on the totals and on every bootstrap replicate (videos resampled, kernels.bootstrap):

    table = count_table(verdicts, ["captioner", "task"], n_codes=3)            # CAPability codes
    hit = lambda c: safe_ratio(c[..., 1] + c[..., 2], c[..., :3].sum(-1))       # POSITIVE+NEGATIVE / all
    precision = lambda c: safe_ratio(c[..., 1], c[..., 1] + c[..., 2])
    frame = metrics_frame(table, {"precision": precision, "hit": hit}, n_resamples=1000, seed=0,
                          average_over="task", average_label="avg")            # adds per-captioner "avg" rows

The result is long format (engine.schemas.metrics_schema): group columns (strings), metric, value, ci_low,
ci_high, n (verdicts with a code), n_no_verdict (rows without one: never dropped silently).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from kernels.aggregate import count_codes_by_cluster
from kernels.bootstrap import cluster_bootstrap, percentile_ci

MetricFn = Callable[[np.ndarray], np.ndarray]


def safe_ratio(num, den) -> np.ndarray:
    """num / den as float64, nan where den == 0 (a group or replicate with nothing to divide by)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    num, den = np.broadcast_arrays(num, den)
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den != 0)
    return out


def f1(p, r) -> np.ndarray:
    """Harmonic mean of precision and recall; 0 when both are 0, nan when either is nan."""
    p = np.asarray(p, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    out = safe_ratio(2.0 * p * r, p + r)
    return np.where((p == 0) & (r == 0), 0.0, out)


def code_share(counts: np.ndarray, numerator: Sequence[int], denominator: Sequence[int]) -> np.ndarray:
    """sum(counts[..., numerator]) / sum(counts[..., denominator]); nan where the denominator is 0."""
    return safe_ratio(counts[..., list(numerator)].sum(-1), counts[..., list(denominator)].sum(-1))


def mean_code_value(counts: np.ndarray, values: Sequence[float]) -> np.ndarray:
    """Mean of values[code] over verdicts with a code (e.g. a 0-5 score per code); nan with no verdicts."""
    v = np.asarray(values, dtype=np.float64)
    k = v.shape[0]
    return safe_ratio((counts[..., :k] * v).sum(-1), counts[..., :k].sum(-1))


@dataclass(frozen=True)
class CountTable:
    """Verdict counts per cluster (video), per group, per code; the last code column is NO_VERDICT."""

    group_columns: list[str]
    groups: pl.DataFrame  # one row per group id, group columns as strings, sorted
    counts: np.ndarray  # int64 (n_clusters, n_groups, n_codes + 1)
    n_codes: int
    clusters: pl.DataFrame  # one row per cluster id: strata columns then the cluster column
    strata: np.ndarray | None = None  # int32 (n_clusters,) stratum id of each cluster, or None

    @property
    def totals(self) -> np.ndarray:
        """int64 (n_groups, n_codes + 1): counts summed over clusters."""
        return self.counts.sum(axis=0)

    @property
    def n_groups(self) -> int:
        return self.counts.shape[1]

    @property
    def n_clusters(self) -> int:
        return self.counts.shape[0]


def _factorize(frame: pl.DataFrame, columns: list[str]) -> tuple[np.ndarray, pl.DataFrame]:
    """(int32 id per row, sorted unique keys) for the given columns; nulls are a key of their own."""
    keys = frame.select(columns)
    if not columns:
        return np.zeros(frame.height, dtype=np.int32), pl.DataFrame()
    uniques = keys.unique().sort(columns, nulls_last=True).with_row_index("__id")
    ids = keys.join(uniques, on=columns, how="left", nulls_equal=True, maintain_order="left")["__id"]
    return ids.cast(pl.Int32).to_numpy(), uniques.drop("__id")


def count_table(verdicts: pl.DataFrame | pa.Table, group_columns: list[str], n_codes: int,
                code_column: str = "verdict", cluster_column: str = "video_id",
                strata_columns: list[str] | None = None) -> CountTable:
    """Counts of verdict codes per (cluster, group). Codes outside [0, n_codes) or null count as NO_VERDICT.

    With strata_columns the bootstrap resamples clusters within each stratum; a cluster is then the pair
    (strata values, cluster value), so a video seen in two strata is two clusters.
    """
    frame = pl.from_arrow(verdicts) if isinstance(verdicts, (pa.Table, pa.RecordBatch)) else verdicts
    if not isinstance(frame, pl.DataFrame):
        raise TypeError(f"verdicts must be a polars DataFrame or pyarrow Table, got {type(verdicts).__name__}")
    strata_columns = list(strata_columns or [])
    needed = [*group_columns, code_column, cluster_column, *strata_columns]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise KeyError(f"verdicts lack column(s) {missing} (have {frame.columns})")
    if n_codes < 1 or n_codes > 127:
        raise ValueError(f"n_codes must be in [1, 127], got {n_codes}")
    dtype = frame.schema[code_column]
    if not dtype.is_integer():
        raise TypeError(f"column {code_column!r} must hold integer verdict codes, got {dtype}")
    codes = frame.get_column(code_column).fill_null(-1)
    # any code outside int8 is outside [0, n_codes) too: fold it to NO_VERDICT before the narrowing cast
    codes = pl.select(pl.when((codes >= 0) & (codes < n_codes)).then(codes).otherwise(-1).cast(pl.Int8)).to_series()
    group_ids, groups = _factorize(frame, list(group_columns))
    cluster_ids, clusters = _factorize(frame, [*strata_columns, cluster_column])
    strata = _factorize(clusters, strata_columns)[0] if strata_columns else None
    n_groups = groups.height if group_columns else (1 if frame.height else 0)
    counts = count_codes_by_cluster(cluster_ids, group_ids, codes.to_numpy(), clusters.height, n_groups, n_codes)
    groups = groups.with_columns(pl.all().cast(pl.String)) if group_columns else groups
    return CountTable(list(group_columns), groups, counts, n_codes, clusters, strata)


def _average_layout(table: CountTable, average_over: str, average_label: str) -> tuple[np.ndarray, pl.DataFrame]:
    """(membership (A, G) float64, group-column rows of the A averages)."""
    if average_over not in table.group_columns:
        raise ValueError(f"average_over={average_over!r} is not a group column ({table.group_columns})")
    others = [c for c in table.group_columns if c != average_over]
    avg_ids, avg_keys = _factorize(table.groups, others)
    n_avg = avg_keys.height if others else 1
    membership = np.zeros((n_avg, table.n_groups))
    membership[avg_ids, np.arange(table.n_groups)] = 1.0
    rows = (avg_keys if others else pl.DataFrame({"__n": [0]})).with_columns(
        pl.lit(average_label, dtype=pl.String).alias(average_over))
    return membership, rows.select(table.group_columns)


def _nanmean_over(values: np.ndarray, membership: np.ndarray) -> np.ndarray:
    """values (..., G) -> (..., A): mean of the finite member values (nan when none)."""
    finite = ~np.isnan(values)
    total = np.where(finite, values, 0.0) @ membership.T
    return safe_ratio(total, finite.astype(np.float64) @ membership.T)


def metrics_frame(table: CountTable, metrics: Mapping[str, MetricFn], *, n_resamples: int = 1000, seed: int = 0,
                  confidence: float = 0.95, scale: float | Mapping[str, float] = 100.0,
                  average_label: str | None = None, average_over: str | None = None) -> pl.DataFrame:
    """Long-format metrics with percentile CIs from a cluster bootstrap (n_resamples=0 skips the CIs).

    Each metric maps counts (..., n_codes + 1) to values (...), vectorised over leading axes. `scale` (one
    number, or per metric with 1.0 for unnamed ones) multiplies value and CI. With `average_over`, extra rows
    give each metric's unweighted mean over that group column (groups where it is nan are left out), labelled
    `average_label` ("avg" by default), with CIs from the same bootstrap replicates.
    """
    if not metrics:
        raise ValueError("metrics is empty")
    names = list(metrics)
    scales = np.array([scale.get(m, 1.0) if isinstance(scale, Mapping) else float(scale) for m in names])
    totals = table.totals
    n_codes = table.n_codes
    membership, avg_rows = (None, None)
    if average_over is not None and table.n_groups == 0:
        _average_layout(table, average_over, average_label or "avg")  # still reject a wrong column name
    elif average_over is not None:
        membership, avg_rows = _average_layout(table, average_over, average_label or "avg")

    def evaluate(counts: np.ndarray) -> np.ndarray:
        """counts (..., G, K+1) -> (..., n_metrics, G [+ A]) float64."""
        out = []
        for name in names:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.asarray(metrics[name](counts), dtype=np.float64)
            if v.shape != counts.shape[:-1]:
                raise ValueError(f"metric {name!r} returned shape {v.shape} for counts {counts.shape}; "
                                 f"it must reduce only the last (code) axis")
            if membership is not None:
                v = np.concatenate([v, _nanmean_over(v, membership)], axis=-1)
            out.append(v)
        return np.stack(out, axis=-2)

    value = evaluate(totals.astype(np.float64))  # (n_metrics, G [+ A])
    if n_resamples > 0 and table.n_clusters > 0 and table.n_groups > 0:
        samples = cluster_bootstrap(table.counts, evaluate, n_resamples, seed, table.strata)
        low, high = percentile_ci(samples, confidence)
    else:
        low = high = np.full_like(value, np.nan)
    n = totals[:, :n_codes].sum(-1)
    n_nv = totals[:, n_codes]
    keys = table.groups.select(table.group_columns) if table.group_columns else pl.DataFrame()
    if membership is not None:
        n = np.concatenate([n, (membership @ n).astype(np.int64)])
        n_nv = np.concatenate([n_nv, (membership @ n_nv).astype(np.int64)])
        keys = pl.concat([keys, avg_rows])
    n_rows, n_metrics = value.shape[1], len(names)
    row_index = np.repeat(np.arange(n_rows), n_metrics)  # group-major, metrics in the given order
    metric_index = np.tile(np.arange(n_metrics), n_rows)
    s = scales[metric_index]
    frame = pl.DataFrame({
        "metric": pl.Series([names[i] for i in metric_index], dtype=pl.String),
        "value": value.T.ravel() * s,
        "ci_low": low.T.ravel() * s,
        "ci_high": high.T.ravel() * s,
        "n": n[row_index].astype(np.int64),
        "n_no_verdict": n_nv[row_index].astype(np.int64),
    })
    if table.group_columns:
        frame = pl.concat([keys[row_index], frame], how="horizontal")
    return frame
