"""Judge validation: how far a judge's verdicts are from a recorded reference judge's on the very same (item, caption)
pairs (`capeval judge validate`, docs/validation.md).

Rows of the two verdict tables are matched by (task, item_id, sub_index, step); only reference rows that carry a
verdict take part (the pairs the reference actually judged). For each block -- `overall` and every task -- it reports

  * `agreement` (the share of rows where both judges gave the same code), Cohen's `kappa` and Gwet's `ac1`
    (kernels/agreement.py) over the rows where the judge gave a verdict too, and the `confusion` matrix
    (reference code x judge code, labels from the protocol's `verdict_labels()`, plus a `no verdict` column for
    rows the judge failed). kappa is None (JSON null) where it is undefined: both judges used one single code,
    so chance agreement is 1 (a task where every item is a hit).
  * for each headline metric of the protocol's paired statistic (`paired_spec(mode)`): the judge's value, the
    reference's, `bias = metric(judge) - metric(reference)` and its paired bootstrap interval, resampling videos
    (both judges' rows of a video move together: capeval.kernels.bootstrap.paired_bootstrap_diff), and
    `outside_tolerance`: the interval leaves [-T, T] (None without a tolerance). Metrics are on the protocol's
    own scale (percent for most). Rows the judge failed count as the protocol's metrics count them in `mode`.
    `overall` averages the per-task values when the protocol averages over tasks (`compare_average_over`), else
    pools every row. Each metric's average is over the SAME tasks for both judges: the tasks where both judges'
    verdicts define it. A task where either leaves it undefined (a 0/0: F1 when precision and recall are both 0)
    is left out of both sides and named with its reason in the metric's `tasks_left_out` (`tasks`: how many are
    averaged), as the leaderboard's `*` average; without any task left the value is null with a `reason`. The set
    is fixed from all rows; a bootstrap replicate in which one of its tasks becomes undefined is left out of the
    interval (percentile_ci ignores nan replicates).

The protocol is found through the registry only (docs/architecture.md), so any protocol with a paired statistic can
be validated; one without gets agreement and confusion but no metrics (a note says so).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import polars as pl

from capeval.engine.metrics.paired import per_video_stats
from capeval.engine.registry import lookup
from capeval.engine.schemas import NO_VERDICT
from capeval.kernels.agreement import cohen_kappa, gwet_ac1
from capeval.kernels.bootstrap import paired_bootstrap_diff

#: how rows of the two tables are matched (sub_index null = 0, step null = ""; see aligned_rows)
ROW_KEY = ("task", "item_id", "sub_index", "step")
NO_VERDICT_LABEL = "no verdict"


class ValidationInputError(ValueError):
    """The two verdict tables cannot be compared (duplicate rows, nothing in common): the caller's inputs."""


def _comparable(verdicts: pl.DataFrame, intermediate_steps) -> pl.DataFrame:
    """Final-step rows with the key columns normalised: sub_index null -> 0 (a one-row item), step null -> ""."""
    v = verdicts
    step = pl.col("step").cast(pl.String) if "step" in v.columns else pl.lit(None, pl.String)
    v = v.with_columns(step.fill_null("").alias("step"))
    if intermediate_steps:
        v = v.filter(~pl.col("step").is_in(list(intermediate_steps)))
    sub = pl.col("sub_index") if "sub_index" in v.columns else pl.lit(None, pl.Int32)
    return v.select(pl.col("task").cast(pl.String), pl.col("item_id").cast(pl.String),
                    pl.col("video_id").cast(pl.String), sub.cast(pl.Int32).fill_null(0).alias("sub_index"), "step",
                    pl.col("verdict").cast(pl.Int64))


def _duplicates(rows: pl.DataFrame, key: list[str], side: str) -> None:
    dup = rows.group_by(key).len().filter(pl.col("len") > 1)
    if dup.height:
        ex = dup.row(0, named=True)
        raise ValidationInputError(
            f"the {side} verdicts have {dup.height} rows judged more than once (e.g. task {ex['task']!r}, item "
            f"{ex['item_id']!r}, sub_index {ex['sub_index']}): validation compares one verdict per row; give one "
            f"caption set and one trial (seed) per item")


def aligned_rows(reference: pl.DataFrame, judged: pl.DataFrame, intermediate_steps=()) -> tuple[pl.DataFrame, dict]:
    """(rows, counts): one row per reference row that has a verdict, with `reference` and `judge` codes (judge =
    NO_VERDICT when the judge gave none or has no such row), `task`, `video_id`, `step`. counts: reference rows
    without a verdict (left out), judged rows that are not in the reference (ignored)."""
    ref, jud = _comparable(reference, intermediate_steps), _comparable(judged, intermediate_steps)
    if (ref["step"] == "").all() or (jud["step"] == "").all():  # a release without step names: match on the rest
        ref, jud = ref.with_columns(pl.lit("").alias("step")), jud.with_columns(pl.lit("").alias("step"))
    key = list(ROW_KEY)
    _duplicates(ref, key, "reference")
    _duplicates(jud, key, "judged")
    with_verdict = ref.filter(pl.col("verdict") >= 0)
    rows = with_verdict.rename({"verdict": "reference"}).join(
        jud.select(*key, pl.col("verdict").alias("judge")), on=key, how="left")
    rows = rows.with_columns(pl.col("judge").fill_null(NO_VERDICT))
    counts = {"reference_rows": ref.height, "reference_rows_without_verdict": ref.height - with_verdict.height,
              "judged_rows_not_in_reference": jud.join(ref, on=key, how="anti").height}
    if rows.height == 0:
        raise ValidationInputError("the reference has no row with a verdict" if ref.height else
                                   "the reference has no verdict rows")
    return rows, counts


def _labels(protocol, codes) -> dict[int, str]:
    """code -> name from the protocol (verdict_labels()), else the codes seen, named by their number."""
    labels = dict(sorted(protocol.verdict_labels().items())) if protocol is not None else {}
    for c in sorted(set(int(c) for c in codes if c >= 0) - set(labels)):
        labels[c] = str(c)
    return labels


def _finite(x) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


def agreement_block(reference: np.ndarray, judge: np.ndarray, labels: dict[int, str]) -> dict:
    """agreement, kappa, ac1 over rows where both judges gave a verdict; the confusion matrix over every row."""
    ref, jud = np.asarray(reference, np.int64), np.asarray(judge, np.int64)
    both = (ref >= 0) & (jud >= 0)
    n = int(both.sum())
    q = max(labels) + 1 if labels else 0
    position = np.full(q + 1, len(labels), dtype=np.int64)  # code -> matrix index; NO_VERDICT -> the last column
    position[list(labels)] = np.arange(len(labels))
    counts = np.zeros((len(labels), len(labels) + 1), dtype=np.int64)
    np.add.at(counts, (position[ref], position[np.where(jud >= 0, jud, q)]), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kappa = cohen_kappa(ref[both], jud[both], n_categories=q) if n else float("nan")
        ac1 = gwet_ac1(np.stack([ref[both], jud[both]], axis=1), n_categories=q) if n else float("nan")
    return {"n": int(ref.size), "n_compared": n, "n_judge_no_verdict": int((jud < 0).sum()),
            "agreement": float((ref[both] == jud[both]).mean()) if n else None,
            "kappa": _finite(kappa), "ac1": _finite(ac1),
            "confusion": {"reference": list(labels.values()), "judge": [*labels.values(), NO_VERDICT_LABEL],
                          "counts": counts.tolist()}}


def _per_video(rows: pl.DataFrame, spec, group: pl.Expr, videos: list[str], groups: list[str]) -> np.ndarray:
    """(V, G, S) sums of the spec's per-row statistics per (video, group)."""
    return per_video_stats(rows.with_columns(group.alias("_task")), spec, videos, groups)


def _metric_values(spec, names: list[str], sums: np.ndarray) -> np.ndarray:
    """(..., G, S) sums -> (..., G, M) values of the metrics `names`, nan where undefined (a 0/0)."""
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.stack([np.asarray(spec.metrics[m](sums), dtype=np.float64) for m in names], axis=-1)


def _undefined_for(judge: float, reference: float) -> str | None:
    """Why a value cannot be compared: the side(s) that leave it undefined (nan), None when both define it."""
    sides = [side for side, v in (("judge", judge), ("reference", reference)) if np.isnan(v)]
    return f"undefined for the {' and the '.join(sides)} (0/0)" if sides else None


def metric_bias(rows: pl.DataFrame, spec, average_over: str | None, tasks: list[str], *, n_resamples: int,
                seed: int, confidence: float, tolerance: float | None) -> dict[str, dict]:
    """{block ("overall" or a task): {metric: {judge, reference, bias, ci_low, ci_high, outside_tolerance}}}; a null
    bias has a `reason`; where the protocol averages over tasks, each overall metric says over how many (`tasks`)
    and which it left out of both sides and why (`tasks_left_out`, module docstring)."""
    videos = sorted(set(rows["video_id"].to_list()))
    overall_by = pl.col(average_over).cast(pl.String) if average_over else pl.lit("all")
    overall_groups = sorted(set(rows.select(overall_by.alias("g"))["g"].to_list()))
    names = list(spec.metrics)
    sides = {}
    for side in ("judge", "reference"):
        r = rows.with_columns(pl.col(side).alias("verdict"))
        sides[side] = np.concatenate([_per_video(r, spec, pl.col("task"), videos, tasks),
                                      _per_video(r, spec, overall_by, videos, overall_groups)], axis=1)
    n_tasks = len(tasks)
    # (G, M): the groups each metric is averaged over, those both judges define it on, from all rows
    full = {s: _metric_values(spec, names, c.sum(axis=0)[n_tasks:]) for s, c in sides.items()}
    averaged = ~np.isnan(full["judge"]) & ~np.isnan(full["reference"])

    def statistic(sums: np.ndarray) -> np.ndarray:  # (..., T + G, S) -> (..., T + 1, M)
        vals = _metric_values(spec, names, sums)
        if average_over:  # a plain mean over each metric's groups: nan when one is undefined here, or none is left
            with np.errstate(divide="ignore", invalid="ignore"):
                overall = np.where(averaged, vals[..., n_tasks:, :], 0.0).sum(axis=-2) / averaged.sum(axis=0)
        else:
            overall = vals[..., n_tasks, :]
        return np.concatenate([vals[..., :n_tasks, :], overall[..., None, :]], axis=-2) * spec.scale

    res = paired_bootstrap_diff(sides["judge"], sides["reference"], statistic, n_resamples=n_resamples, seed=seed,
                                confidence=confidence)
    value = {s: statistic(c.sum(axis=0)[None])[0] for s, c in sides.items()}
    out = {}
    for b, block in enumerate([*tasks, "overall"]):
        out[block] = {}
        for k, m in enumerate(names):
            lo, hi = _finite(res.ci_low[b, k]), _finite(res.ci_high[b, k])
            outside = None
            if tolerance is not None and lo is not None and hi is not None:
                outside = bool(lo < -tolerance or hi > tolerance)
            entry = {"judge": _finite(value["judge"][b, k]), "reference": _finite(value["reference"][b, k]),
                     "bias": _finite(res.estimate[b, k]), "ci_low": lo, "ci_high": hi, "outside_tolerance": outside}
            left_out = {}
            if block == "overall" and average_over:
                left_out = {g: _undefined_for(full["judge"][j, k], full["reference"][j, k])
                            for j, g in enumerate(overall_groups) if not averaged[j, k]}
                entry["tasks"] = int(averaged[:, k].sum())
                entry["tasks_left_out"] = left_out
            if entry["bias"] is None:
                entry["reason"] = (f"no {average_over} where both judges define it" if block == "overall" and left_out
                                   and not averaged[:, k].any() else
                                   _undefined_for(value["judge"][b, k], value["reference"][b, k]) or "undefined")
            out[block][m] = entry
    return out


def validate(reference: pl.DataFrame, judged: pl.DataFrame, *, protocol: str, mode: str = "strict",
             tolerance: float | None = None, n_resamples: int = 2000, seed: int = 0,
             confidence: float = 0.95) -> dict:
    """The validation report (a JSON-ready dict): counts, `overall` and `tasks.<task>` blocks (module docstring)."""
    if tolerance is not None and not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    proto = lookup("protocol", protocol)
    rows, counts = aligned_rows(reference, judged, getattr(proto, "intermediate_steps", ()))
    labels = _labels(proto, [*rows["reference"].to_list(), *rows["judge"].to_list()])
    tasks = sorted(set(rows["task"].to_list()))
    ordered = [t for t in getattr(proto, "tasks", ()) if t in tasks] + [t for t in tasks if t not in proto.tasks]
    spec = proto.paired_spec(mode)
    notes = []
    bias = {}
    if spec is None:
        notes.append(f"protocol {protocol!r} declares no paired statistic (paired_spec): no metric bias")
    elif n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    else:
        bias = metric_bias(rows, spec, proto.compare_average_over, ordered, n_resamples=n_resamples, seed=seed,
                           confidence=confidence, tolerance=tolerance)

    def block(sel: pl.DataFrame, name: str) -> dict:
        out = agreement_block(sel["reference"].to_numpy(), sel["judge"].to_numpy(), labels)
        out["n_videos"] = sel["video_id"].n_unique()
        out["metrics"] = bias.get(name, {})
        return out

    report = {"protocol": protocol, "mode": mode, "tolerance": tolerance, "n_resamples": n_resamples,
              "confidence": confidence, "seed": seed, "counts": counts,
              "overall_average": ("per metric, mean over the tasks where both judges define it"
                                  if proto.compare_average_over == "task" else "pooled rows"),
              "overall": block(rows, "overall"),
              "tasks": {t: block(rows.filter(pl.col("task") == t), t) for t in ordered}}
    if notes:
        report["notes"] = notes
    return report


def outside_tolerance(report: dict) -> list[str]:
    """"block.metric" for each metric whose bias interval leaves the tolerance (overall first, then tasks)."""
    blocks = [("overall", report.get("overall") or {})] + list((report.get("tasks") or {}).items())
    return [f"{name}.{m}" for name, b in blocks for m, v in (b.get("metrics") or {}).items()
            if v.get("outside_tolerance")]


def validation_summary(path: str | Path, judge_revision: str | None = None) -> dict:
    """What a run record shows for a judge's `validated = FILE`: the file, the validated judge and reference,
    overall agreement and kappa and the metrics outside tolerance; `revision_matches` says whether the file
    validated the judge revision this run used (False: the judge changed since). An unreadable file is reported
    with its error, never fatal (the run's results do not depend on it)."""
    path = Path(path)
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        overall = report["overall"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {"status": "unreadable", "file": str(path), "error": f"{type(exc).__name__}: {exc}"}
    judge = report.get("judge") or {}
    out = {"status": "validated", "file": str(path), "judge": judge.get("name"),
           "judge_revision": judge.get("revision"), "reference": (report.get("reference") or {}).get("label"),
           "protocol": report.get("protocol"), "mode": report.get("mode"), "n": overall.get("n"),
           "agreement": overall.get("agreement"), "kappa": overall.get("kappa"), "ac1": overall.get("ac1"),
           "tolerance": report.get("tolerance"), "outside_tolerance": outside_tolerance(report)}
    if judge_revision and judge.get("revision"):  # a judge class that states no revision up front: not compared
        out["revision_matches"] = judge.get("revision") == judge_revision
    return out


def judge_validation_record(judges, revisions: dict | None = None, protocols=()) -> dict:
    """{judge label: validation_summary(...) or {"status": "unvalidated"}} for a sweep's judges. A validation holds
    for the protocol it was made on: the sweep's other protocols (`protocols`: their names) are listed in
    `not_validated_for`, so a judge validated on one protocol does not pass as validated on another."""
    revisions = revisions or {}
    out = {}
    for j in judges:
        label = getattr(j, "display", None) or j.name
        file = getattr(j, "validated", None)
        out[label] = validation_summary(file, revisions.get(label)) if file else {"status": "unvalidated"}
        if out[label].get("status") == "validated":
            uncovered = sorted(set(protocols) - {out[label].get("protocol")})
            if uncovered:
                out[label]["not_validated_for"] = uncovered
    return out


def format_report(report: dict, digits: int = 1) -> str:
    """Plain text for the terminal: one block per line (overall first), its metrics' bias, the overall confusion."""

    def num(v, d=3, sign=False):
        return "-" if v is None else f"{v:+.{d}f}" if sign else f"{v:.{d}f}"

    judge, ref = report.get("judge") or {}, report.get("reference") or {}
    tol = report.get("tolerance")
    lines = [f"judge validation: {report['protocol']} ({report['mode']} mode): judge {judge.get('name', '?')} vs "
             f"reference {ref.get('label', '?')}", ""]
    c = report.get("counts") or {}
    if c.get("reference_rows_without_verdict"):
        lines.append(f"{c['reference_rows_without_verdict']} reference rows have no verdict: left out")
    if c.get("reference_rows_not_in_items"):
        lines.append(f"{c['reference_rows_not_in_items']} reference rows match no item of --items: left out")
    footnotes = []
    for name, b in [("overall", report["overall"])] + list(report["tasks"].items()):
        lines.append(f"{name:<24} rows {b['n']:>5}  videos {b['n_videos']:>5}  judge failed "
                     f"{b['n_judge_no_verdict']:>4}  agreement {num(b['agreement'])}  kappa {num(b['kappa'])}  "
                     f"ac1 {num(b['ac1'])}")
        for m, v in (b.get("metrics") or {}).items():
            flag = ""
            if v["outside_tolerance"]:  # biased (0 outside the interval), or too few rows to show it is within ±T
                flag = f"  OUTSIDE ±{tol:g}: " + ("biased" if v["ci_low"] > 0 or v["ci_high"] < 0 else
                                                  "too few rows to tell")
            elif v.get("reason"):
                flag = f"  ({v['reason']})"
            left_out = v.get("tasks_left_out") or {}
            star = "*" if left_out else ""
            if left_out:  # the leaderboard's `*`: an average over fewer tasks, the same ones on both sides
                footnotes.append(f"* {m}: mean over the {v['tasks']} of {v['tasks'] + len(left_out)} tasks both "
                                 f"judges define it on; left out of both sides: "
                                 + "; ".join(f"{t} ({why})" for t, why in left_out.items()))
            lines.append(f"    {m + star:<12} judge {num(v['judge'], digits):>6}  reference "
                         f"{num(v['reference'], digits):>6}  bias {num(v['bias'], digits, True):>6} "
                         f"[{num(v['ci_low'], digits, True)}, {num(v['ci_high'], digits, True)}]{flag}")
    if footnotes:
        lines += ["", *footnotes]
    conf = report["overall"]["confusion"]
    corner = "reference \\ judge"
    first = max(len(x) for x in conf["reference"] + [corner]) + 1
    width = max(len(x) for x in conf["judge"]) + 2
    lines += ["", "confusion (rows: reference, columns: judge):",
              f"{corner:<{first}}" + "".join(f"{x:>{width}}" for x in conf["judge"])]
    lines += [f"{r:<{first}}" + "".join(f"{n:>{width}}" for n in row)
              for r, row in zip(conf["reference"], conf["counts"])]
    pct = int(round(report["confidence"] * 100))
    lines.append(f"\nbias = metric(judge) - metric(reference) on the same rows; [{pct}% paired bootstrap interval over "
                 f"videos, {report['n_resamples']} resamples]"
                 + (f"; tolerance ±{tol:g}: an interval leaving it is flagged" if tol is not None else
                    "; no --tolerance given: nothing flagged")
                 + ". kappa '-' = undefined (both judges used one single code).")
    if tol is not None:
        lines.append("biased: the interval excludes 0; too few rows to tell: it holds 0 but is wider than the "
                     "tolerance, so more rows (or a larger --per-task) are needed to show the bias is within it.")
    return "\n".join(lines)
