"""Paired comparisons: for two systems judged on the same videos, the difference of each headline metric with a
paired cluster-bootstrap CI and a two-sided p-value, Holm-adjusted over every comparison shown.

Pairing is by video (the bootstrap's cluster): both systems' per-video statistics are stacked and every replicate
resamples the SAME videos for both (capeval.kernels.bootstrap.paired_bootstrap_diff, one BLAS product per chunk of
replicates, no Python loop over replicates). Only videos both systems have verdicts for enter. Each protocol says,
through the protocol interface (capeval.engine.protocols.base), how its verdict rows become per-video statistics and which
functions of their sums are its headline metrics (`paired_spec(mode)`, an capeval.engine.metrics.paired.PairedSpec), the
mode used when the run names none (`compare_default_mode`) and the verdict column its headline averages over
(`compare_average_over`: the mean of the values defined in that replicate). A protocol without a paired statistic
gets one note row instead of differences.

Default pairs are the one-factor contrasts: two systems of the same dataset, protocol and judge that differ in
exactly one of captioner, prompt, frame spec. `select_pairs(a=..., b=...)` picks others. Every difference is a − b,
a being the `a` side, else the system that sorts first (engine/report/ordering.py: frame specs by frame count):
verdict rows come in whatever order cells finished, and taking that order made the direction differ between judges.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from capeval.engine.metrics.paired import PairedSpec, per_video_stats, task_mean_values
from capeval.engine.registry import lookup
from capeval.engine.report.ordering import sorted_values, system_sort_key
from capeval.kernels.bootstrap import paired_bootstrap_diff

FACTORS = ["captioner", "prompt_id", "frame_spec"]
FIXED = ["dataset", "protocol", "judge"]
MIN_VIDEOS = 20
#: columns of compare_run's frame
RESULT_SCHEMA = {"dataset": pl.String, "protocol": pl.String, "judge": pl.String, "differs": pl.String,
                 "same": pl.String, "a": pl.String, "b": pl.String, "metric": pl.String, "a_value": pl.Float64,
                 "b_value": pl.Float64, "diff": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
                 "p_value": pl.Float64, "p_holm": pl.Float64, "n_videos": pl.Int64, "warning": pl.String}


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


def matches_selector(row: dict, selector: str | None) -> bool:
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


def _orientations(x: dict, y: dict) -> list[tuple[dict, dict]]:
    """(x, y) and (y, x), the canonical one first: a is the system that sorts first over the factors they differ in
    (engine/report/ordering.py: frame specs by frame count, the rest as text), whatever order the rows came in."""
    differ = [c for c in FACTORS if x[c] != y[c]]
    first = system_sort_key(x, differ) <= system_sort_key(y, differ)
    return [(x, y), (y, x)] if first else [(y, x), (x, y)]


def select_pairs(systems: pl.DataFrame, a: str | None = None, b: str | None = None,
                 all_pairs: bool = False) -> list[tuple[dict, dict, str]]:
    """(system a, system b, factors that differ) within one (dataset, protocol, judge).

    Without selectors: every pair differing in exactly one factor (all_pairs: in any), a being the system that sorts
    first (frame specs by frame count), so the direction of a − b is the same for every judge and dataset. With
    `a`/`b`: systems matching `a` against systems matching `b`, the factors neither selector names held equal
    (all_pairs: not). Pairs come in a fixed order: by dataset, protocol, judge, then a's and b's sort keys."""
    rows = list(systems.iter_rows(named=True))
    pairs = []
    for i, first in enumerate(rows):
        for second in rows[i + 1:]:
            if any(first[c] != second[c] for c in FIXED):
                continue
            differ = [c for c in FACTORS if first[c] != second[c]]
            if not differ:
                continue
            for x, y in _orientations(first, second):
                if _wanted(x, y, differ, a, b, all_pairs):
                    pairs.append((x, y, ",".join(differ)))
                    break
    return sorted(pairs, key=lambda p: (system_sort_key(p[0], FIXED), p[2], system_sort_key(p[0], FACTORS),
                                        system_sort_key(p[1], FACTORS)))


def _wanted(x: dict, y: dict, differ: list[str], a: str | None, b: str | None, all_pairs: bool) -> bool:
    """Whether (x as a, y as b) is a pair the selectors ask for."""
    if not (matches_selector(x, a) and matches_selector(y, b)):
        return False
    if (a and not b and matches_selector(y, a)) or (b and not a and matches_selector(x, b)):
        return False  # one side given: the other side is everything else
    if all_pairs:
        return True
    if a or b:
        free = _named(x, a) | _named(y, b)
        return all(c in free for c in differ) and (bool(a and b) or len(differ) == 1)
    return len(differ) == 1


#: how the selector problems name each column (plural, for the list of valid values)
_PLURAL = {"captioner": "captioners", "prompt_id": "prompt ids", "frame_spec": "frame specs", "dataset": "datasets",
           "protocol": "protocols", "judge": "judges"}


def selector_problems(systems: pl.DataFrame, selector: str | None, option: str = "--a") -> list[str]:
    """Why `selector` can match no system, naming the valid keys or values (e.g. "no system has captioner=nobody;
    captioners: local, qwen"); [] when every part of it names something the run has."""
    problems = []
    columns = [c for c in FACTORS + FIXED if c in systems.columns]
    values = {c: sorted_values(c, [str(v) for v in systems[c].to_list()]) for c in columns}
    for part in (selector or "").split(","):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not key and not value:
            continue
        if sep and key not in values:
            problems.append(f"{option} {part.strip()!r}: unknown key {key!r}; keys: {', '.join(columns)}")
        elif sep and value not in values[key]:
            problems.append(f"{option}: no system has {key}={value}; {_PLURAL[key]}: {', '.join(values[key])}")
        elif not sep and not any(key in v for v in values.values()):
            listed = "; ".join(f"{_PLURAL[c]}: {', '.join(values[c])}" for c in FACTORS if c in values)
            problems.append(f"{option}: no system has a captioner, prompt id or frame spec {key!r}; {listed}")
    return problems


def compare_run(verdicts: pl.DataFrame, *, a: str | None = None, b: str | None = None, all_pairs: bool = False,
                modes: dict[str, str] | None = None, n_resamples: int = 2000, seed: int = 0,
                confidence: float = 0.95, min_videos: int = MIN_VIDEOS) -> pl.DataFrame:
    """Paired differences (a - b) of every headline metric for the selected pairs of systems.

    verdicts: labelled verdict rows (capeval.engine.report.rundir.load_run(...).verdicts). modes: protocol label or name ->
    mode used for the metric functions (default: the protocol's `compare_default_mode`). Columns: RESULT_SCHEMA
    (dataset, protocol, judge, differs, same (the factors held equal), a, b, metric, a_value, b_value, diff,
    ci_low, ci_high, p_value, p_holm, n_videos, warning). A protocol that has no paired statistic (or is not
    registered) gives one row per (dataset, protocol, judge) with metric "-" and the reason as its warning."""
    modes = modes or {}
    out, skipped = [], {}
    systems = verdicts.select(FIXED + FACTORS + ["protocol_name"]).unique(maintain_order=True)
    for x, y, differ in select_pairs(systems, a, b, all_pairs):
        name = x["protocol_name"]
        protocol, spec, why = _protocol_spec(name, modes.get(x["protocol"], modes.get(name)))
        if spec is None:
            skipped.setdefault((x["dataset"], x["protocol"], x["judge"]), why)
            continue
        out += _compare_pair(verdicts, x, y, differ, spec, protocol.compare_average_over, n_resamples, seed,
                             confidence, min_videos)
    out += [{"dataset": d, "protocol": p, "judge": j, "differs": "-", "same": "-", "a": "-", "b": "-", "metric": "-",
             "n_videos": 0, "warning": why} for (d, p, j), why in skipped.items()]
    if not out:
        return pl.DataFrame(schema=RESULT_SCHEMA)
    frame = pl.DataFrame(out, schema=RESULT_SCHEMA)
    p_holm = pl.Series("p_holm", holm(frame["p_value"].to_numpy())).fill_nan(None)  # no p-value: no p_holm
    return frame.with_columns(p_holm).select(list(RESULT_SCHEMA))


def _protocol_spec(name: str, mode: str | None):
    """(protocol, its PairedSpec for `mode` or its default mode, None) or (protocol or None, None, why not)."""
    try:
        protocol = lookup("protocol", name)
    except KeyError:
        return None, None, f"not compared: {name!r} is not a registered protocol"
    spec = protocol.paired_spec(mode or protocol.compare_default_mode)
    if spec is None:
        return protocol, None, f"not compared: protocol {name!r} declares no paired statistic (paired_spec is None)"
    return protocol, spec, None


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
        return task_mean_values(spec, sums, names)

    res = paired_bootstrap_diff(ca, cb, statistic, n_resamples=n_resamples, seed=seed, confidence=confidence)
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


def format_comparison(frame: pl.DataFrame, digits: int = 1) -> str:
    """Plain text: one line per (pair, metric), then the multiple-comparison note."""
    if frame.is_empty():
        return "no pairs of systems judged on the same videos"

    def num(v):
        return "-" if v is None else f"{v:+.{digits}f}"

    lines = []
    for key, g in frame.group_by(["dataset", "protocol", "judge", "differs", "same", "a", "b"], maintain_order=True):
        if g["metric"].to_list() == ["-"]:  # a protocol compare could not pair (compare_run says why)
            lines.append(f"== {key[1]} ({key[0]}, judge {key[2]}): {g['warning'][0]}")
            continue
        lines.append(f"== {key[1]} ({key[0]}, judge {key[2]}): a = {key[5]}  vs  b = {key[6]}   "
                     f"[{key[3]} differs; {key[4]}]")
        for r in g.iter_rows(named=True):
            ci = f"[{num(r['ci_low'])}, {num(r['ci_high'])}]"
            p = "-" if r["p_value"] is None else f"{r['p_value']:.3f}"
            ph = "-" if r["p_holm"] is None else f"{r['p_holm']:.3f}"
            lines.append(f"   {r['metric']:<12} a-b = {num(r['diff']):>7} {ci:<18} p = {p} (Holm {ph})  "
                         f"videos = {r['n_videos']}" + (f"  warning: {r['warning']}" if r["warning"] else ""))
    n = int(frame["p_value"].is_not_null().sum())
    lines.append("a-b is a's value minus b's (a: the --a side, else the system that sorts first, frame specs by "
                 "frame count), the same direction for every judge.")
    lines.append(f"Paired bootstrap over shared videos (same resampled videos for a and b). Holm's correction "
                 f"is over all {n} differences shown: read p_holm when you look at several; a p-value alone "
                 f"from one of {n} tests overstates the evidence.")
    return "\n".join(lines)
