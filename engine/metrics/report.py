"""Long-format metric frames from per-video sums, and a readable text table of them.

`cluster_metrics_frame` is the small engine the protocol metrics (CapQuiz, LVCap-Eval, VidCapBench, VC-Inspector)
share: every metric there is a function of *sums over videos* of a few per-video columns (code counts, or
per-video ratios with presence flags for macro averages), so one point estimate (all videos) and one percentile
bootstrap that resamples videos (kernels.bootstrap.cluster_bootstrap) serve them all.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import polars as pl

VALUE_COLUMNS = ["metric", "value", "ci_low", "ci_high", "n", "n_no_verdict"]


def cluster_metrics_frame(
    units: pl.DataFrame,
    by: list[str],
    stat_columns: list[str],
    fns: dict[str, Callable[[np.ndarray], np.ndarray]],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    scale: float = 100.0,
    cluster_column: str = "video_id",
    n_column: str = "_n",
    no_verdict_column: str = "_nv",
) -> pl.DataFrame:
    """One row per (group of `by`, metric).

    units: rows with `by` columns, `cluster_column`, numeric `stat_columns`, and row counts `n_column` /
    `no_verdict_column` (n = rows − rows without a verdict, n_no_verdict = the latter). fns map sums (..., len(stat_columns)) to values (nan where
    undefined, reported as null). value = fn(sum over all clusters of the group) * scale; CI = percentile interval
    of fn over `n_resamples` cluster resamples (null when n_resamples == 0). Rows come sorted by `by`. Clusters are sorted by id, and every
    group uses the same seed, so groups over the same videos get the same replicate weights (paired)."""
    from kernels.bootstrap import cluster_bootstrap, percentile_ci

    missing = [c for c in by + [cluster_column, n_column, no_verdict_column] + stat_columns if c not in units.columns]
    if missing:
        raise KeyError(f"units table lacks columns {missing}")
    names = list(fns)
    rows = []
    for key, g in units.sort(by, nulls_last=True).group_by(by, maintain_order=True) if by else [((), units)]:
        per = (g.group_by(cluster_column)
               .agg([pl.col(c).cast(pl.Float64).sum() for c in stat_columns + [n_column, no_verdict_column]])
               .sort(cluster_column))
        arr = per.select(stat_columns).to_numpy().astype(np.float64).reshape(per.height, len(stat_columns))
        with np.errstate(divide="ignore", invalid="ignore"):
            point = [float(np.asarray(fns[m](arr.sum(axis=0)[None]))[0]) for m in names]
        low = high = np.full(len(names), np.nan)
        if n_resamples > 0 and per.height > 0:
            def stack(s: np.ndarray) -> np.ndarray:
                with np.errstate(divide="ignore", invalid="ignore"):
                    return np.stack([np.asarray(fns[m](s), dtype=np.float64) for m in names], axis=-1)

            low, high = percentile_ci(cluster_bootstrap(arr, stack, n_resamples, seed), confidence)
        base = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        n_nv = int(per[no_verdict_column].sum())
        n = int(per[n_column].sum()) - n_nv  # rows with a verdict, as engine.metrics.core reports n
        for j, m in enumerate(names):
            rows.append({**base, "metric": m, "value": point[j] * scale, "ci_low": float(low[j]) * scale,
                         "ci_high": float(high[j]) * scale, "n": n, "n_no_verdict": n_nv})
    schema = {**{c: pl.String for c in by}, "metric": pl.String, "value": pl.Float64, "ci_low": pl.Float64,
              "ci_high": pl.Float64, "n": pl.Int64, "n_no_verdict": pl.Int64}
    return pl.DataFrame(rows, schema=schema).with_columns(pl.col(c).fill_nan(None) for c in ("value", "ci_low", "ci_high"))


def code_count_units(verdicts: pl.DataFrame, unit_columns: list[str], n_codes: int,
                     code_column: str = "verdict") -> tuple[pl.DataFrame, list[str]]:
    """Per-unit code counts: columns _c0.._c{n_codes-1}, _c{n_codes} (no verdict: code outside [0, n_codes)),
    _n (rows) and _nv (rows without a verdict). Returns (table, the count column names)."""
    code = pl.col(code_column).cast(pl.Int64)
    nv = (code < 0) | (code >= n_codes) | code.is_null()
    cols = [f"_c{k}" for k in range(n_codes + 1)]
    table = verdicts.group_by(unit_columns, maintain_order=True).agg(
        *[(code == k).fill_null(False).sum().alias(cols[k]) for k in range(n_codes)],
        nv.sum().alias(cols[n_codes]), pl.len().alias("_n"), nv.sum().alias("_nv"),
    )
    return table, cols


def format_table(frame: pl.DataFrame, digits: int = 2) -> str:
    """A plain-text table: group columns, metric, value [ci_low, ci_high], n, n_no_verdict."""
    groups = [c for c in frame.columns if c not in VALUE_COLUMNS]

    def num(x) -> str:
        return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"

    header = groups + ["metric", "value", "95% CI", "n", "no verdict"]
    body = [[str(r[c]) for c in groups] + [r["metric"], num(r["value"]), f"[{num(r['ci_low'])}, {num(r['ci_high'])}]",
                                           str(r["n"]), str(r["n_no_verdict"])] for r in frame.iter_rows(named=True)]
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in body]
    return "\n".join(lines)
