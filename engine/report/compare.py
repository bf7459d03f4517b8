"""Paired comparisons: for two systems judged on the same videos, the difference of each headline metric with a
paired cluster-bootstrap CI and a two-sided p-value, Holm-adjusted over every comparison shown.

Pairing is by video (the bootstrap's cluster): both systems' per-video statistics are stacked and every replicate
resamples the SAME videos for both (kernels.bootstrap.paired_bootstrap_diff, one BLAS product per chunk of
replicates, no Python loop over replicates). Only videos both systems have verdicts for enter. Each protocol says
how its verdict rows become per-video statistics and which functions of their sums are its headline metrics
(`PAIRED_SPECS`); averages over tasks (CAPability) are means of the tasks defined in that replicate.

Default pairs are the one-factor contrasts: two systems of the same dataset, protocol and judge that differ in
exactly one of captioner, prompt, frame spec. `select_pairs(a=..., b=...)` picks others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from kernels.bootstrap import paired_bootstrap_diff

FACTORS = ["captioner", "prompt_id", "frame_spec"]
FIXED = ["dataset", "protocol", "judge"]
MIN_VIDEOS = 20


@dataclass(frozen=True)
class PairedSpec:
    """How one protocol's verdicts become per-video statistics (V, T, S) and headline metrics of their sums."""

    stats: Callable[[pl.DataFrame, dict], pl.DataFrame]  # rows -> rows with _task and stat columns _s0.._sk
    n_stats: int
    metrics: dict[str, Callable[[np.ndarray], np.ndarray]]  # sums (..., S) -> values (...)
    scale: float = 100.0


def _code_stats(n_codes: int, steps_out: tuple[str, ...] = ()):
    """One-hot code columns (the last one: no verdict) per row; optionally without some judge steps."""

    def stats(v: pl.DataFrame, opts: dict) -> pl.DataFrame:
        if steps_out and "step" in v.columns:
            v = v.filter(pl.col("step").is_null() | ~pl.col("step").is_in(list(steps_out)))
        code = pl.when((pl.col("verdict") >= 0) & (pl.col("verdict") < n_codes)).then(pl.col("verdict")).otherwise(
            n_codes)
        return v.with_columns([(code == k).cast(pl.Float64).alias(f"_s{k}") for k in range(n_codes + 1)])

    return stats


def _capquiz(mode: str) -> PairedSpec:
    from engine.protocols.capquiz.codes import N_CODES
    from engine.protocols.capquiz.metrics import metric_functions

    return PairedSpec(_code_stats(N_CODES), N_CODES + 1, metric_functions(paper_compatible=mode == "paper"))


def _capability(mode: str) -> PairedSpec:
    from engine.protocols.capability.codes import N_CODES
    from engine.protocols.capability.metrics import METRIC_FUNCTIONS

    mode = mode if mode in ("official", "strict") else "official"
    return PairedSpec(_code_stats(N_CODES), N_CODES + 1,
                      {m: (lambda c, fn=fn: fn(c, mode)) for m, fn in METRIC_FUNCTIONS.items()})


def _vidcapbench(mode: str) -> PairedSpec:
    from engine.protocols.vidcapbench.codes import N_CODES
    from engine.protocols.vidcapbench.metrics import metric_functions

    # official mode leaves unscored pairs out of every count, as "paper" does (vidcapbench/metrics.py)
    return PairedSpec(_code_stats(N_CODES, ("answer",)), N_CODES + 1,
                      metric_functions(paper_compatible=mode in ("paper", "official")))


def _vcinspector(mode: str) -> PairedSpec:
    from engine.protocols.vcinspector.codes import N_CODES
    from engine.protocols.vcinspector.metrics import mean_score

    return PairedSpec(_code_stats(N_CODES), N_CODES + 1, {"mean_score": mean_score}, scale=1.0)


def _lvcap(mode: str) -> PairedSpec:
    """Per video: matched/total events each way (averaged over videos, as lvcap's default) and scene answers."""
    from engine.protocols.lvcap.codes import N_ENTAILMENT_CODES, N_SCENE_CODES, EntailmentVerdict, SceneQAVerdict
    from engine.protocols.lvcap.metrics import ENTAIL_STEPS

    paper = mode.startswith("paper")
    pooled = mode.endswith("/pooled")  # events pooled over videos instead of per-video ratios averaged

    def stats(v: pl.DataFrame, opts: dict) -> pl.DataFrame:
        step = pl.col("step") if "step" in v.columns else pl.lit(None, dtype=pl.String)
        ok_scene = (pl.col("verdict") >= 0) & (pl.col("verdict") < N_SCENE_CODES)
        cols = []
        for i, s in enumerate(ENTAIL_STEPS):
            cols.append(((step == s) & (pl.col("verdict") == int(EntailmentVerdict.ENTAILMENT))).cast(pl.Float64)
                        .alias(f"_m{i}"))
            cols.append((step == s).fill_null(False).cast(pl.Float64).alias(f"_n{i}"))
        bad = (pl.col("verdict") < 0) | (pl.col("verdict") >= N_ENTAILMENT_CODES)
        cols.append((step.is_in(list(ENTAIL_STEPS)).fill_null(False) & bad).cast(pl.Float64).alias("_env"))
        scene = step.is_null() | ~step.is_in(list(ENTAIL_STEPS))
        cols.append((scene & (pl.col("verdict") == int(SceneQAVerdict.CORRECT))).cast(pl.Float64).alias("_sc"))
        cols.append((scene & (ok_scene | (not paper))).cast(pl.Float64).alias("_sn"))
        per = v.with_columns(cols).group_by(["video_id", "_task"]).agg(
            pl.col("_m0", "_n0", "_m1", "_n1", "_sc", "_sn", "_env").sum())
        if paper:  # as lvcap's paper mode (AutoDQ): a video whose entailment judgment failed is left out
            per = per.with_columns(pl.when(pl.col("_env") > 0).then(0.0).otherwise(pl.col(c)).alias(c)
                                   for c in ("_m0", "_n0", "_m1", "_n1"))
        if pooled:
            return per.with_columns(pl.col("_m0").alias("_s0"), pl.col("_n0").alias("_s1"),
                                    pl.col("_m1").alias("_s2"), pl.col("_n1").alias("_s3"),
                                    pl.col("_sc").alias("_s4"), pl.col("_sn").alias("_s5"))
        ratio = [pl.when(pl.col(f"_n{i}") > 0).then(pl.col(f"_m{i}") / pl.col(f"_n{i}")).otherwise(0.0)
                 for i in range(2)]
        return per.with_columns(ratio[0].alias("_s0"), (pl.col("_n0") > 0).cast(pl.Float64).alias("_s1"),
                                ratio[1].alias("_s2"), (pl.col("_n1") > 0).cast(pl.Float64).alias("_s3"),
                                pl.col("_sc").alias("_s4"), pl.col("_sn").alias("_s5"))

    def ratio(a, b):
        from engine.metrics.core import safe_ratio

        return lambda s: safe_ratio(s[..., a], s[..., b])

    def s_e(s):
        from engine.metrics.core import f1

        return f1(ratio(0, 1)(s), ratio(2, 3)(s))

    return PairedSpec(stats, 6, {"S_e": s_e, "S_s": ratio(4, 5)})


PAIRED_SPECS: dict[str, Callable[[str], PairedSpec]] = {
    "capquiz": _capquiz, "capability": _capability, "vidcapbench": _vidcapbench, "vcinspector": _vcinspector,
    "lvcap": _lvcap,
}
#: the headline is an average over this verdict column (per-task metrics, then their mean)
AVERAGE_OVER = {"capability": "task"}
DEFAULT_MODE = {"capability": "official"}


def per_video_stats(rows: pl.DataFrame, spec: PairedSpec, videos: list[str], tasks: list[str]) -> np.ndarray:
    """(V, T, S) float64 sums of the spec's statistics per (video, task), in the given orders."""
    stats = spec.stats(rows, {})
    cols = [f"_s{k}" for k in range(spec.n_stats)]
    agg = stats.group_by(["video_id", "_task"]).agg(pl.col(cols).sum())
    v_idx = agg["video_id"].replace_strict(videos, list(range(len(videos))), default=-1).to_numpy()
    t_idx = agg["_task"].replace_strict(tasks, list(range(len(tasks))), default=-1).to_numpy()
    keep = (v_idx >= 0) & (t_idx >= 0)
    out = np.zeros((len(videos), len(tasks), spec.n_stats))
    np.add.at(out, (v_idx[keep], t_idx[keep]), agg.select(cols).to_numpy()[keep])
    return out


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values (nan entries stay nan and do not count as tests)."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    if not idx.size:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    m = order.size
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adjusted
    return out


def _system_label(row: dict, columns: list[str]) -> str:
    return " | ".join(str(row[c]) for c in columns)


def _matches(row: dict, selector: str | None) -> bool:
    """`captioner=x,prompt_id=y` (every given key must match) or a bare value matching any factor."""
    if not selector:
        return True
    for part in selector.split(","):
        key, _, value = part.partition("=")
        if value:
            if str(row.get(key.strip())) != value.strip():
                return False
        elif key.strip() not in {str(row[c]) for c in FACTORS + FIXED if c in row}:
            return False
    return True


def _named(row: dict, selector: str | None) -> set[str]:
    """The factor columns a selector speaks about (for a bare value: the factors holding that value)."""
    named = set()
    for part in (selector or "").split(","):
        key, _, value = part.partition("=")
        named |= {key.strip()} if value else {c for c in FACTORS if str(row[c]) == key.strip()}
    return named


def select_pairs(systems: pl.DataFrame, a: str | None = None, b: str | None = None,
                 all_pairs: bool = False) -> list[tuple[dict, dict, str]]:
    """(system a, system b, factors that differ) within one (dataset, protocol, judge).

    Without selectors: every pair differing in exactly one factor (all_pairs: in any). With `a`/`b`: systems
    matching `a` against systems matching `b`, the factors neither selector names held equal (all_pairs: not)."""
    rows = list(systems.iter_rows(named=True))
    pairs, seen = [], set()
    for i, x in enumerate(rows):
        for j, y in enumerate(rows):
            if i == j or any(x[c] != y[c] for c in FIXED) or not (_matches(x, a) and _matches(y, b)):
                continue
            if frozenset((i, j)) in seen or (a and not b and _matches(y, a)) or (b and not a and _matches(x, b)):
                continue  # one side given: the other side is everything else
            differ = [c for c in FACTORS if x[c] != y[c]]
            if not differ:
                continue
            if not all_pairs:
                if a or b:
                    free = _named(x, a) | _named(y, b)
                    if any(c not in free for c in differ) or (not (a and b) and len(differ) != 1):
                        continue
                elif len(differ) != 1:
                    continue
            seen.add(frozenset((i, j)))
            pairs.append((x, y, ",".join(differ)))
    return pairs


def compare_run(verdicts: pl.DataFrame, *, a: str | None = None, b: str | None = None, all_pairs: bool = False,
                modes: dict[str, str] | None = None, n_resamples: int = 2000, seed: int = 0,
                confidence: float = 0.95, min_videos: int = MIN_VIDEOS) -> pl.DataFrame:
    """Paired differences (a - b) of every headline metric for the selected pairs of systems.

    verdicts: labelled verdict rows (engine.report.rundir.load_run(...).verdicts). modes: protocol -> mode used
    for the metric functions ("strict" by default; CAPability "official"). Columns: dataset, protocol, judge,
    differs, same (the factors held equal), a, b, metric, a_value, b_value, diff, ci_low, ci_high, p_value,
    p_holm, n_videos, warning."""
    modes = modes or {}
    out = []
    systems = verdicts.select(FIXED + FACTORS + ["protocol_name"]).unique(maintain_order=True)
    for x, y, differ in select_pairs(systems, a, b, all_pairs):
        name = x["protocol_name"]
        if name not in PAIRED_SPECS:
            continue
        spec = PAIRED_SPECS[name](modes.get(x["protocol"], modes.get(name, DEFAULT_MODE.get(name, "strict"))))
        out += _compare_pair(verdicts, x, y, differ, spec, AVERAGE_OVER.get(name), n_resamples, seed, confidence,
                             min_videos)
    if not out:
        return pl.DataFrame(schema={"dataset": pl.String, "protocol": pl.String, "judge": pl.String,
                                    "differs": pl.String, "same": pl.String, "a": pl.String, "b": pl.String, "metric": pl.String,
                                    "a_value": pl.Float64, "b_value": pl.Float64, "diff": pl.Float64,
                                    "ci_low": pl.Float64, "ci_high": pl.Float64, "p_value": pl.Float64,
                                    "p_holm": pl.Float64, "n_videos": pl.Int64, "warning": pl.String})
    frame = pl.DataFrame(out, infer_schema_length=None)
    return frame.with_columns(pl.Series("p_holm", holm(frame["p_value"].to_numpy()))).select(
        "dataset", "protocol", "judge", "differs", "same", "a", "b", "metric", "a_value", "b_value", "diff", "ci_low",
        "ci_high", "p_value", "p_holm", "n_videos", "warning")


def _rows_of(verdicts: pl.DataFrame, system: dict, average_over: str | None) -> pl.DataFrame:
    sel = verdicts
    for c in FIXED + FACTORS:
        sel = sel.filter(pl.col(c) == system[c])
    task = pl.col(average_over).cast(pl.String) if average_over else pl.lit("all")
    return sel.with_columns(task.alias("_task"))


def _compare_pair(verdicts, x, y, differ, spec: PairedSpec, average_over, n_resamples, seed, confidence,
                  min_videos) -> list[dict]:
    rx, ry = _rows_of(verdicts, x, average_over), _rows_of(verdicts, y, average_over)
    videos = sorted(set(rx["video_id"].to_list()) & set(ry["video_id"].to_list()))
    label_cols = [c for c in FACTORS if x[c] != y[c]] or FACTORS
    same = [c for c in FACTORS if x[c] == y[c]]
    base = {"dataset": x["dataset"], "protocol": x["protocol"], "judge": x["judge"], "differs": differ,
            "same": " | ".join(f"{c}={x[c]}" for c in same) or "-",
            "a": _system_label(x, label_cols), "b": _system_label(y, label_cols)}
    if not videos:
        return [{**base, "metric": m, "n_videos": 0, "warning": "no shared videos"} for m in spec.metrics]
    tasks = sorted(set(rx["_task"].to_list()) | set(ry["_task"].to_list()))
    ca, cb = per_video_stats(rx, spec, videos, tasks), per_video_stats(ry, spec, videos, tasks)
    names = list(spec.metrics)

    def statistic(sums: np.ndarray) -> np.ndarray:  # (..., T, S) -> (..., M): metrics averaged over tasks
        with np.errstate(divide="ignore", invalid="ignore"), _quiet():  # 0/0 -> nan: metric undefined there
            vals = np.stack([np.asarray(spec.metrics[m](sums), dtype=np.float64) for m in names], axis=-1)
            return np.nanmean(vals, axis=-2) * spec.scale

    res = paired_bootstrap_diff(ca, cb, statistic, n_resamples=n_resamples, seed=seed, confidence=confidence)
    with _quiet():
        va, vb = statistic(ca.sum(0)[None])[0], statistic(cb.sum(0)[None])[0]
    rows = []
    for k, m in enumerate(names):
        lo, hi, p = float(res.ci_low[k]), float(res.ci_high[k]), float(res.p_value[k])
        warn = []
        if len(videos) < min_videos:
            warn.append(f"{len(videos)} shared videos (< {min_videos})")
        if not np.isnan(lo) and lo == hi:
            warn.append("degenerate interval")
        if not np.isnan(p) and p < 1.0 / n_resamples:
            p = 1.0 / n_resamples  # no replicate crossed zero: the bootstrap resolves p only down to 1/B
            warn.append(f"p < 1/{n_resamples}")
        rows.append({**base, "metric": m, "a_value": _f(va[k]), "b_value": _f(vb[k]), "diff": _f(res.estimate[k]),
                     "ci_low": _f(lo), "ci_high": _f(hi), "p_value": _f(p), "n_videos": len(videos),
                     "warning": "; ".join(warn) or None})
    return rows


def _f(x) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


class _quiet:
    """nanmean over all-nan slices warns; a nan there is the answer (metric undefined in that replicate)."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._w.__exit__(*exc)


def format_comparison(frame: pl.DataFrame, digits: int = 1) -> str:
    """Plain text: one line per (pair, metric), then the multiple-comparison note."""
    if frame.is_empty():
        return "no pairs of systems judged on the same videos"

    def num(v):
        return "-" if v is None else f"{v:+.{digits}f}"

    lines = []
    for key, g in frame.group_by(["dataset", "protocol", "judge", "differs", "same", "a", "b"], maintain_order=True):
        lines.append(f"== {key[1]} ({key[0]}, judge {key[2]}): a = {key[5]}  vs  b = {key[6]}   "
                     f"[{key[3]} differs; {key[4]}]")
        for r in g.iter_rows(named=True):
            ci = f"[{num(r['ci_low'])}, {num(r['ci_high'])}]"
            p = "-" if r["p_value"] is None else f"{r['p_value']:.3f}"
            ph = "-" if r["p_holm"] is None else f"{r['p_holm']:.3f}"
            lines.append(f"   {r['metric']:<12} a-b = {num(r['diff']):>7} {ci:<18} p = {p} (Holm {ph})  "
                         f"videos = {r['n_videos']}" + (f"  warning: {r['warning']}" if r["warning"] else ""))
    n = int(frame["p_value"].is_not_null().sum())
    lines.append(f"Paired bootstrap over shared videos (same resampled videos for a and b). Holm's correction "
                 f"is over all {n} differences shown: read p_holm when you look at several; a p-value alone "
                 f"from one of {n} tests overstates the evidence.")
    return "\n".join(lines)
