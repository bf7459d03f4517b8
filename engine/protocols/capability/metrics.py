"""CAPability metrics from VERDICTS: precision, recall, F1 and hit rate per task, and their unweighted average over
the tasks ("avg"), in percent, with CIs from one bootstrap that resamples videos/images (file_id) for all tasks at
once (so `avg` gets a proper interval and action/event, which share videos, are resampled together).

Per task, over verdict rows (one per item; one per object for dynamic_object_number), with the official
`evaluation/eval.py` definitions (pos = POSITIVE, neg = NEGATIVE, miss = MISS, nv = rows without a verdict):
    precision = pos / (pos + neg)        recall = pos / all        hit_rate = (pos + neg) / all
    f1 = 2 * precision * recall / (precision + recall)
mode "official": all = pos + neg + miss — items without a judgment (missing, parse failures) are left out, as the
    official script leaves out unsaved items; their number is reported in n_no_verdict / n_missing / n_failed.
mode "strict": all = pos + neg + miss + nv — a row without a verdict counts as a miss.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow as pa

from engine.metrics.core import bootstrap_frame
from engine.schemas import NO_VERDICT, ParseStatus

from .codes import TASKS, CapabilityQAVerdict, CapabilityVerdict

MODES = ("official", "strict")
METRICS = ("precision", "recall", "f1", "hit_rate")
#: Sweep groups. prompt_set is prompt_id without its media-type suffix: CAPability prompts images and videos
#: differently ("capability/image", "capability/video"), and one average spans both.
GROUP_COLUMNS = ("captioner", "prompt_set", "frame_spec")
_MISS, _POS, _NEG, _NV = int(CapabilityVerdict.MISS), int(CapabilityVerdict.POSITIVE), int(CapabilityVerdict.NEGATIVE), 3


# --- metric functions of count arrays (..., 4) = [miss, positive, negative, no_verdict]; vectorised ---------------

def _denominator(c: np.ndarray, mode: str) -> np.ndarray:
    all_ = c[..., _MISS] + c[..., _POS] + c[..., _NEG]
    return all_ + c[..., _NV] if mode == "strict" else all_


def precision(c: np.ndarray, mode: str = "official") -> np.ndarray:
    return c[..., _POS] / (c[..., _POS] + c[..., _NEG])


def recall(c: np.ndarray, mode: str = "official") -> np.ndarray:
    return c[..., _POS] / _denominator(c, mode)


def f1(c: np.ndarray, mode: str = "official") -> np.ndarray:
    p, r = precision(c, mode), recall(c, mode)
    return 2 * p * r / (p + r)


def hit_rate(c: np.ndarray, mode: str = "official") -> np.ndarray:
    return (c[..., _POS] + c[..., _NEG]) / _denominator(c, mode)


METRIC_FUNCTIONS = {"precision": precision, "recall": recall, "f1": f1, "hit_rate": hit_rate}


def know_but_cannot_tell_rate(c: np.ndarray, mode: str = "official") -> np.ndarray:
    """Counts of caption verdicts over correctly answered QA items -> share that is negative or miss (in strict
    mode a missing caption verdict counts as a miss, in numerator and denominator)."""
    told_wrong = c[..., _MISS] + c[..., _NEG] + (c[..., _NV] if mode == "strict" else 0)
    return told_wrong / _denominator(c, mode)


# --- tables ---------------------------------------------------------------------------------------------------

def _as_frame(table) -> pl.DataFrame:
    return table if isinstance(table, pl.DataFrame) else pl.from_arrow(table)


def _with_groups(df: pl.DataFrame) -> pl.DataFrame:
    exprs = []
    for c in ("captioner", "frame_spec"):
        exprs.append((pl.col(c).cast(pl.String) if c in df.columns else pl.lit(None, pl.String)).fill_null("").alias(c))
    prompt = pl.col("prompt_id").cast(pl.String) if "prompt_id" in df.columns else pl.lit(None, pl.String)
    exprs.append(prompt.fill_null("").str.replace(r"/(image|video)$", "").alias("prompt_set"))
    if "sub_index" not in df.columns:
        exprs.append(pl.lit(None, pl.Int32).alias("sub_index"))
    if "parse_status" not in df.columns:
        exprs.append(pl.when(pl.col("verdict") == NO_VERDICT).then(int(ParseStatus.FAILED)).otherwise(0)
                     .cast(pl.Int8).alias("parse_status"))
    return df.with_columns(exprs)


def _missing_rows(df: pl.DataFrame, items: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """NO_VERDICT/MISSING rows for every (group, item[, object]) that has no verdict row at all."""
    it = items.select("task", "item_id", "video_id", "annotation")
    n_sub = [len(json.loads(a)) if t == "dynamic_object_number" else 1
             for t, a in zip(it["task"].to_list(), it["annotation"].to_list())]
    it = it.with_columns(pl.Series("_n_sub", n_sub, pl.Int32)).drop("annotation")
    expected = groups.join(it, how="cross")
    have = df.select(*GROUP_COLUMNS, "task", "item_id").unique()
    absent = expected.join(have, on=[*GROUP_COLUMNS, "task", "item_id"], how="anti")
    if absent.height == 0:
        return df.clear()
    absent = absent.with_columns(
        pl.when(pl.col("task") == "dynamic_object_number").then(pl.int_ranges(0, pl.col("_n_sub")))
        .otherwise(pl.lit([None], pl.List(pl.Int32))).alias("sub_index")).explode("sub_index")
    rows = absent.select(*GROUP_COLUMNS, "task", "item_id", "video_id", pl.col("sub_index").cast(pl.Int32),
                         pl.lit(NO_VERDICT, pl.Int8).alias("verdict"),
                         pl.lit(int(ParseStatus.MISSING), pl.Int8).alias("parse_status"))
    return rows


def _prepare(verdicts, items, captions) -> pl.DataFrame:
    df = _with_groups(_as_frame(verdicts))
    keep = [*GROUP_COLUMNS, "task", "item_id", "video_id", "sub_index", "verdict", "parse_status"]
    df = df.select(pl.col(c).cast(pl.Int8) if c in ("verdict", "parse_status") else
                   pl.col(c).cast(pl.Int32) if c == "sub_index" else pl.col(c).cast(pl.String) for c in keep)
    if items is not None:
        items = _as_frame(items)
        unknown = df.join(items.select("task", "item_id"), on=["task", "item_id"], how="anti")
        if unknown.height:
            ex = unknown.row(0, named=True)
            raise ValueError(f"{unknown.height} verdict rows are for items not in `items` "
                             f"(e.g. task {ex['task']!r}, item {ex['item_id']!r})")
        groups = df.select(GROUP_COLUMNS).unique()
        if captions is not None:
            cg = _with_groups(_as_frame(captions)).select(GROUP_COLUMNS).unique()
            groups = pl.concat([groups, cg]).unique()
        df = pl.concat([df, _missing_rows(df, items, groups)], how="vertical_relaxed")
    return df


def _ordered_tasks(tasks) -> list[str]:
    present = set(tasks)
    return [t for t in TASKS if t in present] + sorted(present - set(TASKS))


def _task_frame(df: pl.DataFrame, fns: dict, mode: str, n_resamples: int, seed: int, confidence: float,
                average_label: str | None = "avg") -> pl.DataFrame:
    """Long-format rows per (group, task) and per group's average over tasks, with one shared bootstrap per group
    (engine.metrics.core.bootstrap_frame; the average is nan when one task's metric is)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    metrics = {m: (lambda c, fn=fn: fn(c, mode)) for m, fn in fns.items()}
    frames = []
    for key, g in df.group_by(list(GROUP_COLUMNS), maintain_order=True):
        tasks = _ordered_tasks(g["task"].unique().to_list())
        t_idx = g["task"].replace_strict(tasks, list(range(len(tasks))), return_dtype=pl.Int64).to_numpy()
        vids, v_idx = np.unique(g["video_id"].to_numpy().astype(str), return_inverse=True)
        code = g["verdict"].to_numpy().astype(np.int64)
        code = np.where((code >= 0) & (code < 3), code, _NV)
        counts = np.zeros((len(vids), len(tasks), 4), dtype=np.int64)
        np.add.at(counts, (v_idx, t_idx, code), 1)
        status = g["parse_status"].to_numpy()
        nv_rows = code == _NV
        total = counts.sum(axis=0)
        tallies = {
            "n": _denominator(total, mode), "n_no_verdict": total[:, _NV],
            "n_missing": np.bincount(t_idx[nv_rows & (status == int(ParseStatus.MISSING))], minlength=len(tasks)),
            "n_failed": np.bincount(t_idx[nv_rows & (status != int(ParseStatus.MISSING))], minlength=len(tasks)),
        }
        keys = pl.DataFrame({**{c: [k] * len(tasks) for c, k in zip(GROUP_COLUMNS, key)}, "task": tasks},
                            schema={c: pl.String for c in (*GROUP_COLUMNS, "task")})
        frame = bootstrap_frame(counts, keys, metrics, tallies, n_resamples=n_resamples, seed=seed,
                                confidence=confidence, scale=100.0, average_over="task" if average_label else None,
                                average_label=average_label, average_skips_nan=False, nan_as_null=True)
        frames.append(frame.with_columns(pl.lit(mode).alias("mode")))
    if frames:
        return pl.concat(frames, how="vertical")
    schema = {**{c: pl.String for c in GROUP_COLUMNS}, "task": pl.String, "metric": pl.String, "value": pl.Float64,
              "ci_low": pl.Float64, "ci_high": pl.Float64, "n": pl.Int64, "n_no_verdict": pl.Int64,
              "n_missing": pl.Int64, "n_failed": pl.Int64, "mode": pl.String}
    return pl.DataFrame(schema=schema)


def compute_metrics(verdicts, *, items=None, captions=None, n_resamples: int = 1000, seed: int = 0,
                    mode: str = "official", confidence: float = 0.95) -> pl.DataFrame:
    """CAPability metrics in long format: group columns (captioner, prompt_set, frame_spec, task), then
    engine.schemas METRIC_VALUE_COLUMNS, then n_missing / n_failed (rows without a verdict, by why) and mode.

    verdicts: VERDICTS-shaped table (pl.DataFrame or pa.Table). items: ITEMS of the tasks scored; when given,
    items with no verdict row at all are added as MISSING (so they are counted, and in strict mode scored as
    misses). captions: CAPTIONS; when given with items, every (captioner, prompt, frame_spec) seen there is
    expected to have verdicts for every item."""
    df = _prepare(verdicts, items, captions)
    return _task_frame(df, METRIC_FUNCTIONS, mode, n_resamples, seed, confidence)


def know_but_cannot_tell(qa_verdicts, caption_verdicts, *, n_resamples: int = 1000, seed: int = 0,
                         mode: str = "official", confidence: float = 0.95) -> pl.DataFrame:
    """KT: among QA items answered correctly (CapabilityQAVerdict.CORRECT), the share whose caption verdict is
    NEGATIVE or MISS, per task and averaged over tasks, in percent (metric "kt").

    Rows are matched on (task, item_id, sub_index) and, when both tables name captioners, on the group columns.
    Correct QA items with no caption verdict row are counted in n_no_verdict (and in strict mode as misses)."""
    qa = _with_groups(_as_frame(qa_verdicts))
    cap = _with_groups(_as_frame(caption_verdicts))
    keys = ["task", "item_id", "_sub"]
    for c in GROUP_COLUMNS:
        if (qa[c] != "").any() and (cap[c] != "").any():
            keys.append(c)
    qa = qa.with_columns(pl.col("sub_index").fill_null(-1).alias("_sub"))
    cap = cap.with_columns(pl.col("sub_index").fill_null(-1).alias("_sub"))
    dup = cap.group_by(keys).len().filter(pl.col("len") > 1)
    if dup.height:
        raise ValueError(f"caption verdicts have {dup.height} keys with several rows (e.g. {dup.row(0)})")
    correct = qa.filter(pl.col("verdict") == int(CapabilityQAVerdict.CORRECT))
    joined = correct.join(cap.select(*keys, pl.col("verdict").alias("_cv"), pl.col("parse_status").alias("_cs")),
                          on=keys, how="left")
    joined = joined.with_columns(
        pl.col("_cv").fill_null(NO_VERDICT).cast(pl.Int8).alias("verdict"),
        pl.when(pl.col("_cv").is_null()).then(int(ParseStatus.MISSING)).otherwise(pl.col("_cs"))
        .cast(pl.Int8).alias("parse_status"))
    df = joined.select(*GROUP_COLUMNS, "task", "item_id", pl.col("video_id").cast(pl.String),
                       pl.col("sub_index").cast(pl.Int32), "verdict", "parse_status")
    return _task_frame(df, {"kt": know_but_cannot_tell_rate}, mode, n_resamples, seed, confidence)


def wide(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per (group, task): value and CI columns per metric (precision, precision_ci_low, ...) and counts."""
    groups = [c for c in (*GROUP_COLUMNS, "task") if c in metrics.columns]
    counts = metrics.group_by(groups, maintain_order=True).agg(
        pl.col(c).first() for c in ("n", "n_no_verdict", "n_missing", "n_failed", "mode") if c in metrics.columns)
    out = counts
    for m in metrics["metric"].unique(maintain_order=True).to_list():
        part = metrics.filter(pl.col("metric") == m).select(
            *groups, pl.col("value").alias(m), pl.col("ci_low").alias(f"{m}_ci_low"),
            pl.col("ci_high").alias(f"{m}_ci_high"))
        out = out.join(part, on=groups, how="left", maintain_order="left")
    return out


__all__ = ["compute_metrics", "know_but_cannot_tell", "wide", "METRICS", "MODES", "METRIC_FUNCTIONS", "pa"]
