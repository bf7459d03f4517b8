"""DREAM-1K metrics: precision, recall and F1 of the caption's events (percent), overall and broken down by the
release's attributes; every number is computed by AutoDQ's one implementation, LVCap-Eval's compute_metrics
(reached through the registry), and renamed here.

Official mode (verdict steps recall / precision): exactly evaluate_dream_gpt.py's aggregation (lvcap's
autodq_metrics.py): per clip recall and precision, per source (`bucket` "source:DREAM/<source>") the means over the
source's successful clips and F1 of the means, OVERALL (`bucket` "all") the means over the sources and F1 of those;
the official bucket tables by n_subjects, n_shots and n_events ("subjects<=1", "shots==2", "events in [4, 5]",
...: every source pooled, means over the bucket's clips). A clip with a rejected reply is Failed: left out of every
mean, counted in `n_no_verdict`. Also, labelled: `F1_pooled` (F1 of all entailed events over all events) and
`F1_clip_mean` (mean of the per-clip F1s). The official code prints fractions rounded to 3 decimals; capeval
reports unrounded percent.

Strict mode (verdict steps entail_r / entail_p): lvcap's strict event score (per clip P and R, averaged over clips,
F1 of the averages; `event_average="pooled"` pools the events; `paper_compatible` drops a clip with an unjudged
event), overall and per breakdown bucket: each bucket's rows are that bucket's clips' verdicts scored by lvcap.

Both modes: duration buckets (`bucket` "duration:<label>"), edges in SECONDS (`duration_buckets`, default 5, 10,
20: "<=5s", "5-10s", "10-20s", ">20s"; "unknown" without a duration): DREAM-1K's clips last 1 to 50 seconds, and the
official code has no duration table. In official mode a duration bucket pools every source as the official
count-bucket tables do; in strict mode every breakdown (source, subjects, shots, events, duration) is lvcap's strict
score on the bucket's clips.

Per clip: `clip_table(verdicts, items)` reads each clip's recall, precision and F1 (and hit counts) from the
verdict rows' details (`capeval dream1k clips RUN` prints or writes it).
"""

from __future__ import annotations

import json
import math

import polars as pl

from .implementation import implementation

GROUP_COLUMNS = ["captioner", "prompt_id", "frame_spec"]
#: lvcap's metric names -> this benchmark's
METRIC_NAMES = {"S_e": "F1", "event_precision": "precision", "event_recall": "recall", "S_e_pooled": "F1_pooled",
                "S_e_clip_mean": "F1_clip_mean"}
#: the metrics of a breakdown bucket (the official bucket tables show these three)
BUCKET_METRICS = ("S_e", "event_recall", "event_precision")
OFFICIAL_STEPS = ("recall", "precision")
STRICT_STEPS = ("entail_r", "entail_p")
DURATION_EDGES_S = (5.0, 10.0, 20.0)
UNKNOWN = "unknown"
#: the official bucket tables (evaluate_dream_gpt.py, lines 395-430): label and test of the release's counts
COUNT_BUCKETS = {
    "subjects": (("<=1", lambda n: n <= 1), ("==2", lambda n: n == 2), ("==3", lambda n: n == 3),
                 (">=4", lambda n: n >= 4)),
    "shots": (("<=1", lambda n: n <= 1), ("==2", lambda n: n == 2), ("==3", lambda n: n == 3),
              (">=4", lambda n: n >= 4)),
    "events": (("<=3", lambda n: n <= 3), ("in [4, 5]", lambda n: n in (4, 5)), ("in [6, 7]", lambda n: n in (6, 7)),
               (">=8", lambda n: n >= 8)),
}
DURATION_READING = ("the clips of the duration bucket, every source pooled (as the official subject / shot / event "
                    "tables): mean recall and precision over the successful clips, F1 of the means; the official "
                    "code has no duration table")
POOLED_SOURCE = "pooled"


def check_duration_edges(value) -> tuple[float, ...]:
    """Duration bucket edges in seconds from a param (numbers, or text like "5,10,20"); None: DURATION_EDGES_S."""
    if value is None:
        return DURATION_EDGES_S
    parts = value.split(",") if isinstance(value, str) else list(value)
    try:
        edges = tuple(float(x) for x in parts)
    except (TypeError, ValueError):
        raise ValueError(f"duration_buckets: expected edges in seconds such as 5,10,20; got {value!r}") from None
    if not edges or any(not math.isfinite(e) or e <= 0 for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"duration_buckets: need increasing positive edges (seconds); got {value!r}")
    return edges


def duration_label(seconds, edges: tuple[float, ...]) -> str:
    """"<=e0s", "e0-e1s" (above e0, at most e1), ..., ">eNs"; "unknown" without a finite duration."""
    if seconds is None or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return UNKNOWN
    if seconds <= edges[0]:
        return f"<={edges[0]:g}s"
    for a, b in zip(edges, edges[1:]):
        if seconds <= b:
            return f"{a:g}-{b:g}s"
    return f">{edges[-1]:g}s"


def count_label(name: str, n) -> str | None:
    """The official bucket of a clip's n_subjects / n_shots / n_events, as lvcap labels it ("subjects<=1",
    "events in [4, 5]"); None without the count."""
    if n is None:
        return None
    for label, test in COUNT_BUCKETS[name]:
        if test(n):
            return f"{name}{label}" if label[0] in "<=>" else f"{name} {label}"
    return None


def clip_attributes(items: pl.DataFrame | None) -> dict[str, dict]:
    """item_id -> {source, duration, n_subjects, n_shots, n_events} from ITEMS (category = the source, extra = the
    release's attributes)."""
    out: dict[str, dict] = {}
    if items is None or "item_id" not in items.columns:
        return out
    cols = [c for c in ("item_id", "category", "extra") if c in items.columns]
    for rec in items.select(cols).iter_rows(named=True):
        try:
            extra = json.loads(rec.get("extra") or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"items: item {rec['item_id']!r}: field 'extra' is not JSON ({exc})") from None
        extra = extra if isinstance(extra, dict) else {}
        out[rec["item_id"]] = {"source": rec.get("category") or extra.get("dataset") or "all",
                               **{k: extra.get(k) for k in ("duration", "n_subjects", "n_shots", "n_events")}}
    return out


def breakdown_buckets(items: pl.DataFrame | None, edges: tuple[float, ...], *,
                      official: bool) -> dict[str, list[str]]:
    """bucket label -> item ids, for the buckets this module computes itself: duration always; in strict mode the
    sources and the official count buckets too (official mode has them from lvcap)."""
    buckets: dict[str, list[str]] = {}
    for item_id, a in clip_attributes(items).items():
        labels = [f"duration:{duration_label(a['duration'], edges)}"]
        if not official:
            labels.append(f"source:{a['source']}")
            labels += [label for name in COUNT_BUCKETS if (label := count_label(name, a[f"n_{name}"])) is not None]
        for label in labels:
            buckets.setdefault(label, []).append(item_id)
    return dict(sorted(buckets.items()))


def _renamed(frame: pl.DataFrame) -> pl.DataFrame:
    frame = frame.filter(pl.col("metric").is_in(list(METRIC_NAMES)))
    frame = frame.with_columns(pl.col("metric").replace_strict(METRIC_NAMES, return_dtype=pl.String))
    return frame.drop([c for c in ("event_scoring",) if c in frame.columns])


def compute_metrics(
    verdicts: pl.DataFrame,
    *,
    items: pl.DataFrame | None = None,
    captions: pl.DataFrame | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    paper_compatible: bool = False,
    event_average: str = "video",
    duration_buckets=None,
    confidence: float = 0.95,
    **options,
) -> pl.DataFrame:
    """F1, precision, recall (percent) per caption group (captioner, prompt_id, frame_spec) x bucket ("all", then
    the breakdowns), from lvcap's compute_metrics (module doc). `options` may hold the run's other params (mode,
    prompts): the verdict rows say which flow made them."""
    del captions, options
    lvcap = implementation()
    edges = check_duration_edges(duration_buckets)
    settings = {"n_resamples": n_resamples, "seed": seed, "confidence": confidence,
                "paper_compatible": paper_compatible, "event_average": event_average}
    steps = set(verdicts["step"].drop_nulls().to_list()) if "step" in verdicts.columns else set()
    frames = []
    official = verdicts.filter(pl.col("step").is_in(list(OFFICIAL_STEPS) + ["extract"])) \
        if steps & set(OFFICIAL_STEPS) else None
    strict = verdicts.filter(pl.col("step").is_in(list(STRICT_STEPS) + ["extract"])) \
        if steps & set(STRICT_STEPS) else None
    if official is None and strict is None:
        if verdicts.height:
            raise ValueError(f"the verdict table has no DREAM-1K rows to score (steps {sorted(steps)}; expected "
                             f"{list(OFFICIAL_STEPS)} or {list(STRICT_STEPS)})")
        strict = verdicts
    if official is not None:
        whole = lvcap.compute_metrics(official, items=items, **settings)
        frames.append(whole.filter(~pl.col("bucket").str.starts_with("duration:")))
        frames += _bucket_frames(lvcap, official, items, breakdown_buckets(items, edges, official=True),
                                 settings, pooled=True)
    if strict is not None:
        whole = lvcap.compute_metrics(strict, items=items, **settings)
        frames.append(whole.filter(pl.col("bucket") == "all"))
        frames += _bucket_frames(lvcap, strict, items, breakdown_buckets(items, edges, official=False),
                                 settings, pooled=False)
    out = _renamed(pl.concat(frames, how="diagonal_relaxed"))
    front = GROUP_COLUMNS + ["bucket", "mode", "metric", "value", "ci_low", "ci_high", "n", "n_no_verdict"]
    return out.select(front + [c for c in out.columns if c not in front])


def _bucket_frames(lvcap, verdicts: pl.DataFrame, items: pl.DataFrame | None, buckets: dict[str, list[str]],
                   settings: dict, *, pooled: bool) -> list[pl.DataFrame]:
    """lvcap's overall rows of each bucket's clips, relabelled with the bucket. `pooled`: the bucket's items get one
    source, so that lvcap's overall (a mean over sources) is the mean over the bucket's clips, as the official
    bucket tables average."""
    frames = []
    for label, ids in buckets.items():
        part = verdicts.filter(pl.col("item_id").is_in(ids))
        if part.filter(pl.col("step") != "extract").height == 0:
            continue
        sub_items = items.filter(pl.col("item_id").is_in(ids)) if items is not None else None
        if pooled and sub_items is not None:
            sub_items = sub_items.with_columns(pl.lit(POOLED_SOURCE).alias("category"))
        frame = lvcap.compute_metrics(part, items=sub_items, **settings)
        frame = frame.filter((pl.col("bucket") == "all") & pl.col("metric").is_in(list(BUCKET_METRICS)))
        frame = frame.with_columns(pl.lit(label).alias("bucket"))
        if pooled:
            frame = frame.with_columns(pl.lit(DURATION_READING).alias("reading"))
        frames.append(frame)
    return frames


# -- per clip --------------------------------------------------------------------------------------------------------
#: a run folder's cell labels (engine/report/rundir.py), kept apart in the per-clip table
CELL_LABELS = ("dataset", "protocol", "judge")
CLIP_SCHEMA = {**{c: pl.String for c in GROUP_COLUMNS}, "item_id": pl.String, "video_id": pl.String,
               "trial": pl.Int64, "mode": pl.String, "source": pl.String, "duration": pl.Float64,
               "n_subjects": pl.Int64, "n_shots": pl.Int64, "n_events": pl.Int64, "success": pl.Boolean,
               "recall": pl.Float64, "precision": pl.Float64, "f1": pl.Float64, "hits_r": pl.Int64, "n_r": pl.Int64,
               "hits_p": pl.Int64, "n_p": pl.Int64, "n_no_verdict": pl.Int64}


def _f1(r, p) -> float | None:
    if r is None or p is None or r + p == 0:
        return None
    return 2.0 * r * p / (r + p)


def clip_table(verdicts: pl.DataFrame, items: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (run cell, caption group, clip, judge trial, mode) with the clip's recall, precision and F1 as
    fractions, read from the verdict rows' details, and the release's attributes from `items`. The cell's labels
    (dataset, protocol, judge) come first when the verdicts carry them (a run folder's do).

    Official rows: recall / precision are the accepted replies' scores (hits / events; 1.0 for an empty list, as
    the official code scores it); `success` is False for a Failed clip (a step's reply rejected), whose values are
    null. Strict rows: hits / events of each direction, an unjudged event counted as not entailed (in
    `n_no_verdict`); a direction without events is null."""
    attrs = clip_attributes(items)
    v = verdicts.filter(pl.col("step").is_in(list(OFFICIAL_STEPS + STRICT_STEPS)))
    labels = [c for c in CELL_LABELS if c in v.columns]
    v = v.with_columns([pl.col(c).cast(pl.String).fill_null("-") if c in v.columns else pl.lit("-").alias(c)
                        for c in labels + GROUP_COLUMNS])
    if "trial" not in v.columns:
        v = v.with_columns(pl.lit(0).alias("trial"))
    ident = labels + GROUP_COLUMNS
    clips: dict[tuple, dict] = {}
    for rec in v.select(ident + ["item_id", "video_id", "trial", "step", "verdict", "detail"]).iter_rows(named=True):
        mode = "official" if rec["step"] in OFFICIAL_STEPS else "strict"
        key = tuple(rec[c] for c in ident) + (rec["item_id"], rec["trial"], mode)
        clip = clips.setdefault(key, {**{c: rec[c] for c in ident}, "item_id": rec["item_id"], "mode": mode,
                                      "video_id": rec["video_id"], "trial": rec["trial"], "hits_r": 0, "n_r": 0,
                                      "hits_p": 0, "n_p": 0, "n_no_verdict": 0, "ok": {}})
        judged = rec["verdict"] is not None and rec["verdict"] >= 0 and bool(rec["detail"])
        d = rec["step"][-1] if rec["step"] in STRICT_STEPS else rec["step"][0]  # "r" or "p"
        if mode == "official":
            clip["ok"][d] = judged
            if not judged:
                clip["n_no_verdict"] += 1
                continue
            detail = json.loads(rec["detail"])
            clip[f"score_{d}"] = float(detail["score"])
            clip[f"hits_{d}"], clip[f"n_{d}"] = int(detail["hits"]), int(detail["n_events"])
        else:
            clip[f"n_{d}"] += 1
            if not judged:
                clip["n_no_verdict"] += 1
                continue
            clip[f"hits_{d}"] += json.loads(rec["detail"]).get("label") == "entailment"
    rows = []
    for clip in clips.values():
        ok = clip.pop("ok")
        if clip["mode"] == "official":
            success = bool(ok.get("r")) and bool(ok.get("p"))
            r, p = (clip.get("score_r"), clip.get("score_p")) if success else (None, None)
            if not success:
                clip.update(hits_r=None, n_r=None, hits_p=None, n_p=None)
        else:
            success = clip["n_no_verdict"] == 0
            r = clip["hits_r"] / clip["n_r"] if clip["n_r"] else None
            p = clip["hits_p"] / clip["n_p"] if clip["n_p"] else None
        a = attrs.get(clip["item_id"], {})
        rows.append({**{k: clip[k] for k in labels + list(CLIP_SCHEMA) if k in clip}, "source": a.get("source"),
                     "duration": a.get("duration"), **{k: a.get(k) for k in ("n_subjects", "n_shots", "n_events")},
                     "success": success, "recall": r, "precision": p, "f1": _f1(r, p)})
    return pl.DataFrame(rows, schema={**{c: pl.String for c in labels}, **CLIP_SCHEMA})

