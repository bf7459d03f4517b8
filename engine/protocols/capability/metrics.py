"""CAPability metrics from VERDICTS: precision, recall, F1 and hit rate per task, and their unweighted average over
the tasks ("avg"), in percent, with CIs from one bootstrap that resamples videos/images (file_id) for all tasks at
once (so `avg` gets a proper interval and action/event, which share videos, are resampled together).

Per task, over verdict rows (one per item; one per object for dynamic_object_number), with the official
`evaluation/eval.py` definitions (pos = POSITIVE, neg = NEGATIVE, miss = MISS, nv = rows without a verdict):
    precision = pos / (pos + neg)        recall = pos / all        hit_rate = (pos + neg) / all
    f1 = 2 * precision * recall / (precision + recall)
mode "official": all = pos + neg + miss — items without a judgment (missing, parse failures) are left out, as the
    official script leaves out unsaved items; their number is reported in n_no_verdict / n_missing / n_failed.
    Where the official script prints nan or nothing, official mode says why in `note`: a run (task x caption set x
    trial) of at most max_allow_missing items is never asked (engine/judging/rounds.py: its rows carry no verdict,
    the metrics are nan); an item with no caption at all stops the script at that task (its metrics and the
    average are null; official.uncaptioned says how that is found). A failed caption (null text) is capeval's own
    retryable failure: left out and counted in n_missing.
mode "strict": all = pos + neg + miss + nv — a row without a verdict counts as a miss.
In official mode a dynamic_object_number item counts only when every object has a verdict (the official script saves
an item only when all its per-object replies pass); otherwise all its rows are rows without a verdict.
A 0/0 metric (no hits for precision, no rows for recall) is null with the reason in the `note` column, never an
error; a task average over a null task is null too (numpy's mean of a nan is nan, as in the official summary).
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow as pa

from capeval.engine.metrics.core import bootstrap_frame
from capeval.engine.schemas import NO_VERDICT, NOT_ASKED_MARK, ParseStatus

from .codes import TASKS, CapabilityQAVerdict, CapabilityVerdict
from .groups import GROUP_COLUMNS, with_groups
from .official import NO_AVERAGE, NO_CAPTION, NOT_REACHED, uncaptioned

MODES = ("official", "strict")
METRICS = ("precision", "recall", "f1", "hit_rate")
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
                         pl.lit(int(ParseStatus.MISSING), pl.Int8).alias("parse_status"),
                         pl.lit(None, pl.String).alias("error"))
    return rows


def _prepare(verdicts, items, captions) -> pl.DataFrame:
    df = with_groups(_as_frame(verdicts))
    if "error" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("error"))
    keep = [*GROUP_COLUMNS, "task", "item_id", "video_id", "sub_index", "verdict", "parse_status", "error"]
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
            cg = with_groups(_as_frame(captions)).select(GROUP_COLUMNS).unique()
            groups = pl.concat([groups, cg]).unique()
        df = pl.concat([df, _missing_rows(df, items, groups)], how="vertical_relaxed")
    return df


def all_or_nothing(df: pl.DataFrame) -> pl.DataFrame:
    """Official rule: a dynamic_object_number item with any object lacking a verdict has no verdict at all (its
    judged objects become FAILED rows; MISSING rows stay MISSING)."""
    keys = [*GROUP_COLUMNS, "task", "item_id"]
    dyn = (pl.col("task") == "dynamic_object_number")
    broken = df.filter(dyn & (pl.col("verdict") < 0)).select(keys).unique().with_columns(pl.lit(True).alias("_broken"))
    if broken.height == 0:
        return df
    df = df.join(broken, on=keys, how="left").with_columns(pl.col("_broken").fill_null(False))
    return df.with_columns(
        pl.when(pl.col("_broken") & (pl.col("verdict") >= 0)).then(pl.lit(NO_VERDICT, pl.Int8))
        .otherwise(pl.col("verdict")).alias("verdict"),
        pl.when(pl.col("_broken") & (pl.col("verdict") >= 0)).then(pl.lit(int(ParseStatus.FAILED), pl.Int8))
        .otherwise(pl.col("parse_status")).alias("parse_status"),
    ).drop("_broken")


_NOTES = {
    "precision": "undefined (0/0): no hits, nothing the caption mentioned to be right or wrong",
    "recall": "undefined (0/0): no rows with a verdict",
    "hit_rate": "undefined (0/0): no rows with a verdict",
    "f1": "undefined: precision or recall is undefined, or both are 0",
    "kt": "undefined (0/0): no correctly answered QA item with a caption verdict",
}


def _with_notes(frame: pl.DataFrame, label: str = "avg") -> pl.DataFrame:
    """A `note` column saying why a value is null (0/0 and the like)."""
    reason = pl.col("metric").replace_strict(_NOTES, default="undefined")
    avg_reason = pl.lit("undefined: the metric is undefined for at least one task (see its row)")
    note = (pl.when(pl.col("value").is_not_null() & pl.col("value").is_not_nan()).then(pl.lit(None, pl.String))
            .when(pl.col("task") == label).then(avg_reason).otherwise(reason))
    return frame.with_columns(note.alias("note"))


def _ordered_tasks(tasks) -> list[str]:
    present = set(tasks)
    return [t for t in TASKS if t in present] + sorted(present - set(TASKS))


def task_frame(df: pl.DataFrame, fns: dict, mode: str, n_resamples: int, seed: int, confidence: float,
                average_label: str | None = "avg") -> pl.DataFrame:
    """Long-format rows per (group, task) and per group's average over tasks, with one shared bootstrap per group
    (capeval.engine.metrics.core.bootstrap_frame; the average is nan when one task's metric is)."""
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
                                average_label=average_label, average_skips_nan=False, nan_as_null=True,
                                verdict_rows=total[:, :_NV].sum(-1))  # strict: all-failed is no score, not 0
        frames.append(_with_notes(frame.with_columns(pl.lit(mode).alias("mode"))))
    if frames:
        return pl.concat(frames, how="vertical")
    schema = {**{c: pl.String for c in GROUP_COLUMNS}, "task": pl.String, "metric": pl.String, "value": pl.Float64,
              "ci_low": pl.Float64, "ci_high": pl.Float64, "n": pl.Int64, "n_no_verdict": pl.Int64,
              "n_missing": pl.Int64, "n_failed": pl.Int64, "mode": pl.String, "note": pl.String}
    return pl.DataFrame(schema=schema)


def compute_metrics(verdicts, *, items=None, captions=None, n_resamples: int = 1000, seed: int = 0,
                    mode: str = "strict", confidence: float = 0.95) -> pl.DataFrame:
    """CAPability metrics in long format: group columns (captioner, prompt_set, frame_spec, task), then
    capeval.engine.schemas METRIC_VALUE_COLUMNS, then n_missing / n_failed (rows without a verdict, by why) and mode.

    verdicts: VERDICTS-shaped table (pl.DataFrame or pa.Table). items: ITEMS of the tasks scored; when given,
    items with no verdict row at all are added as MISSING (so they are counted, and in strict mode scored as
    misses). captions: CAPTIONS; when given with items, every (captioner, prompt, frame_spec) seen there is
    expected to have verdicts for every item."""
    df = _prepare(verdicts, items, captions)
    if mode == "official":
        df = all_or_nothing(df)
    out = task_frame(df, METRIC_FUNCTIONS, mode, n_resamples, seed, confidence)
    if mode == "official":
        judged = "request_key" in (verdicts.columns if hasattr(verdicts, "columns") else verdicts.schema.names)
        out = _official_stops(out, df, None if items is None else _as_frame(items),
                              None if captions is None else _as_frame(captions), judged)
    return out


def _official_stops(out: pl.DataFrame, df: pl.DataFrame, items, captions, judged: bool) -> pl.DataFrame:
    """Official mode: where the official script prints nan or nothing, say why (official.py, rounds.py): a task of
    at most max_allow_missing items is never asked (nan); an item without a caption stops the script at its task:
    no figure for that task, for every task after it in the official order, nor for the average."""
    keys = [*GROUP_COLUMNS, "task"]
    notes: dict[tuple, str] = {}
    for r in df.filter(pl.col("error").str.starts_with(NOT_ASKED_MARK)).select(*keys, "error").iter_rows():
        notes.setdefault(tuple(r[:-1]), r[-1])
    stopped = uncaptioned(df, items, captions, judged=judged)
    by_group: dict[tuple, str] = {}
    rank = {t: i for i, t in enumerate(TASKS)}  # the official task order: the first stopped task is where it stops
    first_stop: dict[tuple, tuple[str, int]] = {}
    for key, ids in sorted(stopped.items(), key=lambda kv: (kv[0][:-1], rank.get(kv[0][-1], len(TASKS)), kv[0][-1])):
        notes[key] = NO_CAPTION.format(n=len(ids), example=ids[0])
        by_group.setdefault(key[:-1], NO_AVERAGE.format(task=key[-1], n=len(ids)))
        first_stop.setdefault(key[:-1], (key[-1], len(ids)))
    for group, note in by_group.items():
        notes[(*group, "avg")] = note
    if first_stop:  # the tasks after the stop are never reached
        for r in out.select(*keys).unique(maintain_order=True).iter_rows():
            stop = first_stop.get(tuple(r[:-1]))
            task = r[-1]
            if stop is not None and task != "avg" and rank.get(task, len(TASKS)) > rank.get(stop[0], len(TASKS)):
                notes[tuple(r)] = NOT_REACHED.format(task=stop[0], n=stop[1])
    if not notes:
        return out
    table = pl.DataFrame([(*k, v) for k, v in notes.items()], schema=[*keys, "_stop"], orient="row")
    out = out.join(table, on=keys, how="left", maintain_order="left")
    null = pl.col("_stop").is_not_null()
    return out.with_columns(
        *[pl.when(null).then(None).otherwise(pl.col(c)).alias(c) for c in ("value", "ci_low", "ci_high")],
        pl.when(null).then(pl.col("_stop")).otherwise(pl.col("note")).alias("note")).drop("_stop")


def _label_join_keys(qa: pl.DataFrame, cap: pl.DataFrame) -> tuple[list[str], list[str]]:
    """Group columns to join QA and caption verdicts on, and notes for labels that had to be bridged.

    A column named on both sides with the same labels is joined on. When each side names exactly one label and
    they differ (QA run as "gpt-4o", captions as "gpt-4o-0806"), the rows are joined by item and a note says so;
    any other mismatch is an error listing both sides' labels (a silent join would give null or 100%)."""
    keys, notes = [], []
    for c in GROUP_COLUMNS:
        ql = sorted(set(qa[c].to_list()) - {""})
        cl = sorted(set(cap[c].to_list()) - {""})
        if not ql or not cl:
            continue
        if set(ql) <= set(cl):
            keys.append(c)
        elif len(ql) == 1 and len(cl) == 1:
            notes.append(f"{c} labels differ (QA {ql[0]!r}, captions {cl[0]!r}): joined by item")
        else:
            raise ValueError(f"KT: QA verdicts name {c} {ql} but caption verdicts name {cl}; the labels do not match "
                             f"(rename one side, or pass one {c} per table)")
    return keys, notes


def know_but_cannot_tell(qa_verdicts, caption_verdicts, *, n_resamples: int = 1000, seed: int = 0,
                         mode: str = "official", confidence: float = 0.95) -> pl.DataFrame:
    """KT (paper Eq. 4): among QA items answered correctly (CapabilityQAVerdict.CORRECT), the share whose caption
    verdict is NEGATIVE or MISS, per task and averaged over tasks, in percent (metric "kt").

    QA rows join caption rows by (task, item_id) and sub_index; a QA row without sub_index (one question per
    item) joins every object row of that item. Group columns join as `_label_join_keys` says; a bridged label is
    reported in `note`. Correct QA items with no caption verdict row are counted in n_no_verdict (and in strict
    mode as misses). When no correct QA row finds its item among the caption verdicts at all, that is an error
    naming the tables' item ids, not a null or 100% KT."""
    qa = with_groups(_as_frame(qa_verdicts))
    cap = with_groups(_as_frame(caption_verdicts))
    keys, notes = _label_join_keys(qa, cap)
    dup = cap.group_by(["task", "item_id", "sub_index", *keys]).len().filter(pl.col("len") > 1)
    if dup.height:
        raise ValueError(f"caption verdicts have {dup.height} keys with several rows (e.g. {dup.row(0)})")
    correct = qa.filter(pl.col("verdict") == int(CapabilityQAVerdict.CORRECT)).with_row_index("_qid")
    capv = cap.select("task", "item_id", *keys, pl.col("sub_index").alias("_cap_sub"),
                      pl.col("verdict").alias("_cv"), pl.col("parse_status").alias("_cs"))
    joined = correct.join(capv, on=["task", "item_id", *keys], how="left")
    joined = joined.filter(pl.col("sub_index").is_null() | pl.col("_cap_sub").is_null()
                           | (pl.col("sub_index") == pl.col("_cap_sub")))
    # a QA row whose own object has no caption row (only other objects of the item do) stays, without a verdict
    unmatched = correct.join(joined.select("_qid"), on="_qid", how="anti")
    if unmatched.height:
        joined = pl.concat([joined, unmatched], how="diagonal_relaxed")
    if correct.height and joined["_cv"].is_null().all():
        ex = correct.row(0, named=True)
        raise ValueError(f"KT: none of the {correct.height} correctly answered QA items has a caption verdict "
                         f"(e.g. task {ex['task']!r}, item {ex['item_id']!r}); the item ids of the two tables do "
                         f"not match")
    joined = joined.with_columns(
        pl.coalesce("sub_index", "_cap_sub").alias("sub_index"),
        pl.col("_cv").fill_null(NO_VERDICT).cast(pl.Int8).alias("verdict"),
        pl.when(pl.col("_cv").is_null()).then(int(ParseStatus.MISSING)).otherwise(pl.col("_cs"))
        .cast(pl.Int8).alias("parse_status"))
    df = joined.select(*GROUP_COLUMNS, "task", "item_id", pl.col("video_id").cast(pl.String),
                       pl.col("sub_index").cast(pl.Int32), "verdict", "parse_status")
    out = task_frame(df, {"kt": know_but_cannot_tell_rate}, mode, n_resamples, seed, confidence)
    if notes:
        bridge = "; ".join(notes)
        out = out.with_columns(pl.when(pl.col("note").is_null()).then(pl.lit(bridge))
                               .otherwise(pl.col("note") + "; " + bridge).alias("note"))
    return out


def wide(metrics: pl.DataFrame) -> pl.DataFrame:
    """One row per (group, task): value and CI columns per metric (precision, precision_ci_low, ...) and counts."""
    groups = [c for c in (*GROUP_COLUMNS, "task") if c in metrics.columns]
    counts = metrics.group_by(groups, maintain_order=True).agg(
        *(pl.col(c).first() for c in ("n", "n_no_verdict", "n_missing", "n_failed", "mode") if c in metrics.columns),
        *([pl.col("note").drop_nulls().unique(maintain_order=True).str.join("; ").alias("note")]
          if "note" in metrics.columns else []))
    if "note" in counts.columns:  # a task without notes joins to "" (no note): null, as the long rows have it
        counts = counts.with_columns(pl.when(pl.col("note") == "").then(None).otherwise(pl.col("note")).alias("note"))
    out = counts
    for m in metrics["metric"].unique(maintain_order=True).to_list():
        part = metrics.filter(pl.col("metric") == m).select(
            *groups, pl.col("value").alias(m), pl.col("ci_low").alias(f"{m}_ci_low"),
            pl.col("ci_high").alias(f"{m}_ci_high"))
        out = out.join(part, on=groups, how="left", maintain_order="left")
    return out


__all__ = ["compute_metrics", "know_but_cannot_tell", "wide", "METRICS", "MODES", "METRIC_FUNCTIONS", "pa"]
