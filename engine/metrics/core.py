"""Generic metrics layer shared by every protocol: verdicts -> per-cluster sums -> metrics with cluster CIs.

Every metric here is a function of *sums over videos* (clusters) of a few per-video statistics: code counts, or
per-video ratios with presence flags for macro averages. One mechanism, `bootstrap_frame`, evaluates such metrics
on the totals and on every bootstrap replicate (videos resampled, capeval.kernels.bootstrap) and writes the long frame.
A protocol builds a `CountTable` (per video, per group, per code: `count_table`; or per-unit statistics:
`sum_table`) and names its metrics as vectorised functions of counts (..., n_codes + 1) -- the last column is
NO_VERDICT -- and `metrics_frame` runs the mechanism on it:

    table = count_table(verdicts, ["captioner", "task"], n_codes=3)            # a three-code protocol
    hit = lambda c: safe_ratio(c[..., 1] + c[..., 2], c[..., :3].sum(-1))       # POSITIVE+NEGATIVE / all
    precision = lambda c: safe_ratio(c[..., 1], c[..., 1] + c[..., 2])
    frame = metrics_frame(table, {"precision": precision, "hit": hit}, n_resamples=1000, seed=0,
                          average_over="task", average_label="avg")            # adds per-captioner "avg" rows

The result is long format (capeval.engine.schemas.metrics_schema): group columns (strings), metric, value, ci_low,
ci_high, n (verdicts with a code), n_no_verdict (rows without one: never dropped silently). Protocols with their
own count columns (e.g. n_missing, n_failed) call `bootstrap_frame` on their own array.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa

from capeval.engine.metrics.trials import TrialCounts, trial_counts, trial_metrics_frame
from capeval.kernels.aggregate import count_codes_by_cluster
from capeval.kernels.bootstrap import cluster_bootstrap, percentile_ci

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
    """Sums per cluster (video), per group, per statistic: verdict codes (the last column is NO_VERDICT) from
    `count_table`, or per-unit statistics from `sum_table`."""

    group_columns: list[str]
    groups: pl.DataFrame  # one row per group id, group columns as strings, sorted
    counts: np.ndarray  # (n_clusters, n_groups, n_stats): int64 code counts (n_stats = n_codes + 1) or float64 sums
    n_codes: int | None  # None when `counts` holds other statistics than code counts
    clusters: pl.DataFrame  # one row per cluster id: strata columns then the cluster column
    strata: np.ndarray | None = None  # int32 (n_clusters,) stratum id of each cluster, or None
    row_counts: np.ndarray | None = None  # int64 (n_clusters, n_groups, 2): rows with / without a verdict;
    #                                       None: read off the code counts
    trials: TrialCounts | None = None  # per (video, judge trial) counts when groups pool trials (metrics/trials.py)

    @property
    def totals(self) -> np.ndarray:
        """(n_groups, n_stats): counts summed over clusters."""
        return self.counts.sum(axis=0)

    @property
    def n_groups(self) -> int:
        return self.counts.shape[1]

    @property
    def n_clusters(self) -> int:
        return self.counts.shape[0]

    @property
    def rows(self) -> np.ndarray:
        """int64 (n_clusters, n_groups, 2): rows with a verdict, rows without one."""
        if self.row_counts is not None:
            return self.row_counts
        k = self.n_codes
        return np.stack([self.counts[..., :k].sum(-1), self.counts[..., k]], axis=-1).astype(np.int64)


def _as_polars(table, what: str) -> pl.DataFrame:
    frame = pl.from_arrow(table) if isinstance(table, (pa.Table, pa.RecordBatch)) else table
    if not isinstance(frame, pl.DataFrame):
        raise TypeError(f"{what} must be a polars DataFrame or pyarrow Table, got {type(table).__name__}")
    return frame


def _factorize(frame: pl.DataFrame, columns: list[str]) -> tuple[np.ndarray, pl.DataFrame]:
    """(int32 id per row, sorted unique keys) for the given columns; nulls are a key of their own, sorted last."""
    if not columns:
        return np.zeros(frame.height, dtype=np.int32), pl.DataFrame()
    keys = frame.select(columns)
    found = _factorize_by_column(keys)
    if found is not None:
        return found
    uniques = keys.unique().sort(columns, nulls_last=True).with_row_index("__id")
    # lazily, so the join's output holds the ids alone, not a second copy of every row's keys
    ids = (keys.lazy().join(uniques.lazy(), on=columns, how="left", nulls_equal=True, maintain_order="left")
           .select("__id").collect()["__id"])
    return ids.cast(pl.Int32).to_numpy(), uniques.drop("__id")


def _factorize_by_column(keys: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame] | None:
    """_factorize through one int64 per row (key_codes): a hash join or group-by on several string columns encodes
    every row's keys as bytes first (at 100,000 verdict rows of eight group columns, +14 MB for the step; this
    holds a few bytes per row and column). None where key_codes cannot code the columns."""
    codes = key_codes(keys.columns, keys)
    if codes is None:
        return None
    _, first, ids = np.unique(codes[0], return_index=True, return_inverse=True)
    return ids.reshape(-1).astype(np.int32), keys[first]


def key_codes(columns: list[str], *frames: pl.DataFrame) -> list[np.ndarray] | None:
    """One int64 per row of each frame, in the order of the rows' keys (the `columns`' values compared column by
    column, a null after every value) and equal for equal keys across the frames (nulls equal to nulls). None when
    a column is not one string or integer type in every frame, or the codes would not fit in an int64."""
    combined, size = None, 1
    for name in columns:
        dtypes = {frame.schema[name] for frame in frames}
        dtype = dtypes.pop()
        if dtypes or not (dtype == pl.String or dtype.is_integer()):
            return None
        column = pl.concat([frame.get_column(name) for frame in frames], rechunk=False)
        rank = column.rank("dense")  # 1.. in sort order; a null stays null: coded after every value
        distinct = int(rank.max() or 0) + (1 if column.null_count() else 0)
        code = (rank.fill_null(distinct) if column.null_count() else rank).to_numpy().astype(np.int64)
        code -= 1
        del column, rank
        size *= max(distinct, 1)
        if size >= 2**62:
            return None
        if combined is None:
            combined = code
        else:
            combined *= max(distinct, 1)
            combined += code
    if combined is None:
        combined = np.zeros(sum(frame.height for frame in frames), dtype=np.int64)
    return np.split(combined, np.cumsum([frame.height for frame in frames])[:-1])


def _string_keys(groups: pl.DataFrame) -> pl.DataFrame:
    return groups.with_columns(pl.all().cast(pl.String)) if groups.width else groups


def count_table(verdicts: pl.DataFrame | pa.Table, group_columns: list[str], n_codes: int,
                code_column: str = "verdict", cluster_column: str = "video_id",
                strata_columns: list[str] | None = None) -> CountTable:
    """Counts of verdict codes per (cluster, group). Codes outside [0, n_codes) or null count as NO_VERDICT.

    With strata_columns the bootstrap resamples clusters within each stratum; a cluster is then the pair
    (strata values, cluster value), so a video seen in two strata is two clusters.
    """
    frame = _as_polars(verdicts, "verdicts")
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
    trials = trial_counts(frame, group_columns, [*strata_columns, cluster_column], cluster_ids, group_ids,
                          codes.to_numpy(), n_groups, n_codes)  # None: one judge trial per (video, item, group)
    return CountTable(list(group_columns), _string_keys(groups), counts, n_codes, clusters, strata, trials=trials)


def sum_table(units: pl.DataFrame | pa.Table, group_columns: list[str], stat_columns: list[str], *,
              cluster_column: str = "video_id", n_column: str = "_n",
              no_verdict_column: str = "_nv") -> CountTable:
    """Sums of numeric per-unit statistics per (cluster, group), e.g. per-video ratios and presence flags.

    units: rows with the group columns, `cluster_column`, `stat_columns`, and row counts `n_column` (rows) /
    `no_verdict_column` (rows without a verdict), from which n = rows - rows without a verdict."""
    frame = _as_polars(units, "units")
    missing = [c for c in [*group_columns, cluster_column, n_column, no_verdict_column, *stat_columns]
               if c not in frame.columns]
    if missing:
        raise KeyError(f"units table lacks columns {missing}")
    group_ids, groups = _factorize(frame, list(group_columns))
    cluster_ids, clusters = _factorize(frame, [cluster_column])
    n_groups = groups.height if group_columns else (1 if frame.height else 0)
    sums = np.zeros((clusters.height, n_groups, len(stat_columns)))
    np.add.at(sums, (cluster_ids, group_ids), frame.select(stat_columns).cast(pl.Float64).to_numpy())
    no_verdict = frame.get_column(no_verdict_column).cast(pl.Int64).to_numpy()
    rows = np.zeros((clusters.height, n_groups, 2), dtype=np.int64)
    np.add.at(rows, (cluster_ids, group_ids, 0), frame.get_column(n_column).cast(pl.Int64).to_numpy() - no_verdict)
    np.add.at(rows, (cluster_ids, group_ids, 1), no_verdict)
    return CountTable(list(group_columns), _string_keys(groups), sums, None, clusters, None, rows)


def _average_layout(keys: pl.DataFrame, average_over: str, average_label: str) -> tuple[list[np.ndarray], pl.DataFrame]:
    """(member group indices of each average, group-column rows of the averages)."""
    if average_over not in keys.columns:
        raise ValueError(f"average_over={average_over!r} is not a group column ({keys.columns})")
    others = [c for c in keys.columns if c != average_over]
    avg_ids, avg_keys = _factorize(keys, others)
    n_avg = avg_keys.height if others else 1
    members = [np.flatnonzero(avg_ids == a) for a in range(n_avg)]
    rows = (avg_keys if others else pl.DataFrame({"__n": [0]})).with_columns(
        pl.lit(average_label, dtype=pl.String).alias(average_over))
    return members, rows.select(keys.columns)


def _average(values: np.ndarray, members: list[np.ndarray], skip_nan: bool) -> np.ndarray:
    """values (..., G) -> (..., A): mean over each average's member groups. skip_nan: of the finite member values
    (nan when none); else nan as soon as one member is nan."""
    finite = ~np.isnan(values)
    filled = np.where(finite, values, 0.0)
    out = []
    for idx in members:
        n_finite = finite[..., idx].sum(-1)
        # contiguous members: numpy then sums each row pairwise, exactly as ndarray.mean(-1) does
        mean = safe_ratio(np.ascontiguousarray(filled[..., idx]).sum(-1), n_finite)
        out.append(mean if skip_nan else np.where(n_finite == len(idx), mean, np.nan))
    return np.stack(out, axis=-1)


def bootstrap_frame(sums: np.ndarray, keys: pl.DataFrame, metrics: Mapping[str, MetricFn],
                    tallies: Mapping[str, np.ndarray], *, n_resamples: int = 1000, seed: int = 0,
                    confidence: float = 0.95, scale: float | Mapping[str, float] = 100.0, strata=None,
                    average_over: str | None = None, average_label: str | None = None,
                    average_skips_nan: bool = True, nan_as_null: bool = False,
                    verdict_rows: np.ndarray | None = None, replicates=None) -> pl.DataFrame:
    """The one mechanism: long-format metrics with percentile CIs from one cluster bootstrap over all groups.

    sums: (n_clusters, n_groups, n_stats) per-cluster sums; keys: one row per group (its group columns, or no
    columns for a single group); tallies: per-group integer columns written after the CI (n, n_no_verdict, ...).
    Each metric maps sums (..., n_stats) to values (...), vectorised over leading axes; it is evaluated on the
    totals and on `n_resamples` replicates that resample clusters (within `strata`), with the same replicates
    for every group (n_resamples=0 skips the CIs). `scale` (one number, or per metric with 1.0 for unnamed ones)
    multiplies value and CI. With `average_over`, extra rows (labelled `average_label`, "avg" by default, after
    the group rows) give each metric's unweighted mean over that group column, the tallies summed, with CIs from
    the same replicates; groups where the metric is nan are left out (`average_skips_nan`) or make it nan.
    `verdict_rows` (per group: rows with a verdict) marks groups without a single verdict: their metrics are null,
    whatever the formula would make of rows that all failed (a strict recall of 0/N is a failure, not a score),
    and an average over them treats them as undefined.
    `replicates(evaluate, value)`, if given, draws the (n_resamples, n_metrics, rows) replicate values instead of
    the cluster bootstrap.
    """
    if not metrics:
        raise ValueError("metrics is empty")
    names = list(metrics)
    scales = np.array([scale.get(m, 1.0) if isinstance(scale, Mapping) else float(scale) for m in names])
    n_clusters, n_groups = sums.shape[0], sums.shape[1]
    members, avg_rows = None, None
    if average_over is not None and n_groups == 0:
        _average_layout(keys, average_over, average_label or "avg")  # still reject a wrong column name
    elif average_over is not None:
        members, avg_rows = _average_layout(keys, average_over, average_label or "avg")
    unjudged = None
    if verdict_rows is not None and n_groups and not np.all(np.asarray(verdict_rows) > 0):
        unjudged = np.asarray(verdict_rows).reshape(n_groups) == 0

    def evaluate(s: np.ndarray) -> np.ndarray:
        """sums (..., G, S) -> (..., n_metrics, G [+ A]) float64."""
        out = []
        for name in names:
            with np.errstate(divide="ignore", invalid="ignore"):
                v = np.asarray(metrics[name](s), dtype=np.float64)
            if v.shape != s.shape[:-1]:
                raise ValueError(f"metric {name!r} returned shape {v.shape} for sums {s.shape}; "
                                 f"it must reduce only the last (statistic) axis")
            if unjudged is not None:
                v = np.where(unjudged, np.nan, v)
            if members is not None:
                v = np.concatenate([v, _average(v, members, average_skips_nan)], axis=-1)
            out.append(v)
        return np.stack(out, axis=-2)

    # totals summed pairwise along a contiguous cluster axis: exact for counts, and the accurate order for floats
    totals = np.ascontiguousarray(np.moveaxis(sums, 0, -1)).sum(-1)
    value = evaluate(totals.astype(np.float64))  # (n_metrics, G [+ A])
    if n_resamples > 0 and n_clusters > 0 and n_groups > 0:
        samples = (cluster_bootstrap(sums, evaluate, n_resamples, seed, strata) if replicates is None
                   else replicates(evaluate, value))  # engine/metrics/trials.py: the two-stage bootstrap
        low, high = percentile_ci(samples, confidence)
    else:
        low = high = np.full_like(value, np.nan)
    counts = {name: np.asarray(t, dtype=np.int64) for name, t in tallies.items()}
    if members is not None:
        counts = {name: np.concatenate([t, [t[idx].sum() for idx in members]]).astype(np.int64)
                  for name, t in counts.items()}
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
        **{name: t[row_index] for name, t in counts.items()},
    })
    if keys.width:
        frame = pl.concat([keys[row_index], frame], how="horizontal")
    if nan_as_null:
        frame = frame.with_columns(pl.col(c).fill_nan(None) for c in ("value", "ci_low", "ci_high"))
    if unjudged is not None:  # null, not nan, whatever nan_as_null says: there is nothing to compute on
        empty = unjudged if members is None else np.concatenate([unjudged, [unjudged[i].all() for i in members]])
        mask = pl.Series(empty[row_index])
        frame = frame.with_columns(pl.when(mask).then(None).otherwise(pl.col(c)).alias(c)
                                   for c in ("value", "ci_low", "ci_high"))
    return frame


def metrics_frame(table: CountTable, metrics: Mapping[str, MetricFn], *, n_resamples: int = 1000, seed: int = 0,
                  confidence: float = 0.95, scale: float | Mapping[str, float] = 100.0,
                  average_label: str | None = None, average_over: str | None = None, resample: str = "joint",
                  nan_as_null: bool = False) -> pl.DataFrame:
    """`bootstrap_frame` of a CountTable, with n (rows with a verdict) and n_no_verdict per group; a group with
    n = 0 has null metrics (no verdict to compute them on).

    resample="joint": one bootstrap over all clusters of the table, shared by all groups (paired groups; needed
    for `average_over`). resample="per_group": each group resamples only the clusters it has rows in, with the
    same seed for every group (groups over the same videos then get the same replicates)."""
    if table.trials is not None:  # groups pool judge trials: two-stage intervals, ci_kind, judge_noise_share
        return trial_metrics_frame(table, metrics, bootstrap_frame, n_resamples=n_resamples, seed=seed,
                                   confidence=confidence, scale=scale, average_label=average_label,
                                   average_over=average_over, resample=resample, nan_as_null=nan_as_null)
    rows = table.rows
    keys = table.groups.select(table.group_columns) if table.group_columns else pl.DataFrame()
    options = dict(n_resamples=n_resamples, seed=seed, confidence=confidence, scale=scale, nan_as_null=nan_as_null)
    if resample == "joint" or table.n_groups == 0:
        tallies = {"n": rows[..., 0].sum(0), "n_no_verdict": rows[..., 1].sum(0)}
        return bootstrap_frame(table.counts, keys, metrics, tallies, strata=table.strata, average_over=average_over,
                               average_label=average_label, verdict_rows=tallies["n"], **options)
    if resample != "per_group":
        raise ValueError(f"resample must be 'joint' or 'per_group', got {resample!r}")
    if average_over is not None:
        raise ValueError("average_over needs resample='joint' (averages share one bootstrap over all groups)")
    present = rows.sum(-1) > 0
    frames = []
    for g in range(table.n_groups):
        idx = np.flatnonzero(present[:, g])
        tallies = {"n": rows[idx, g, 0].sum(keepdims=True), "n_no_verdict": rows[idx, g, 1].sum(keepdims=True)}
        strata = None if table.strata is None else table.strata[idx]
        frames.append(bootstrap_frame(table.counts[idx, g][:, None], keys[g:g + 1], metrics, tallies,
                                      strata=strata, verdict_rows=tallies["n"], **options))
    return pl.concat(frames, how="vertical")
