"""LVCap-Eval metrics: scene score S_s and event score S_e, overall and per duration bucket.

Strict mode (capeval's own flow, steps answer / entail_r / entail_p):
* S_s — scene level: yes/no questions answered from the caption (SceneQAVerdict); S_s = 100 * correct / answered
  questions, pooled over questions.
* S_e — event level, AutoDQ-style (Wang et al., "Tarsier", arXiv 2407.00634): a judge classifies each caption event
  against the reference (step "entail_p") and each reference event against the caption (step "entail_r"), ONE
  EVENT PER CALL with the answer constrained to entailment / neutral / contradiction; only ENTAILMENT counts, in
  both directions. Per video P_v and R_v, averaged over videos, F1 of the averages (`event_average="pooled"`
  pools events instead). How this differs from official AutoDQ (below): one call per event instead of one per list,
  no source level (AutoDQ averages per source, then over sources), an unjudged event counts as unmatched instead of
  failing the clip, and a direction without events is left out of that direction's average instead of scoring 1.0.

No verdict: strict mode (default) keeps an unjudged event in its video's denominator as unmatched and an
unanswered scene question as wrong; `paper_compatible=True` (mode "paper") does what the official scripts do:
AutoDQ drops a whole video when its judge output fails to parse, so a video with any unjudged event row is left
out of S_e, and unanswered scene questions leave the S_s denominator. `n_no_verdict` is reported either way.

Duration buckets: `duration` (seconds) in `items.extra` JSON, bucketed by `duration_buckets` = edges in minutes (param; a list or "2,5,10,15,20").
Default: the paper's buckets 2-5, 6-10, 11-15, 16-20 min, i.e. [2, 5], (5, 10], (10, 15], (15, 20]; durations outside
go to "<2min" / ">20min", rows without a duration to "unknown". CIs: percentile bootstrap resampling videos
(capeval.kernels.bootstrap.cluster_bootstrap), the same replicate weights for every group, so groups scored on the same
videos are paired.

Official mode (`mode="official"` rows, steps event_match / recall / precision / scene_qa): S_e as the paper defines
it (`event_scoring="paper"`, the default: paper_metrics.py, per-video Eq. 1 from Prompt5, mean over videos, with
category and duration rows), or as DREAM-1K's AutoDQ aggregates it (`event_scoring="autodq"`: autodq_metrics.py, per
clip -> per source -> OVERALL, buckets by subjects / shots / events, with S_e_pooled and S_e_clip_mean labelled).
Event rows say which in the columns `event_scoring` and `reading` (how the numbers were aggregated, where the paper
is silent capeval's reading). S_s from Prompt4's per-video counts: `S_s` = mean over videos of 100 * correct /
questions (Prompt4's per-video total_score), `S_s_pooled` = 100 * all correct / all questions; a video whose reply
was rejected is left out and counted in n_no_verdict.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from capeval.engine.metrics.buckets import duration_bucket, duration_edges
from capeval.engine.metrics.core import metrics_frame, safe_ratio, sum_table

from .codes import N_ENTAILMENT_CODES, N_SCENE_CODES, EntailmentVerdict, SceneQAVerdict
from capeval.engine.protocols.lvcap import autodq_metrics, paper_metrics

GROUP_COLUMNS = ["captioner", "prompt_id", "frame_spec"]
ENTAIL_STEPS = ("entail_p", "entail_r")
ALL = "all"


def f1(p, r) -> np.ndarray:
    p, r = np.asarray(p, dtype=np.float64), np.asarray(r, dtype=np.float64)
    return safe_ratio(2.0 * p * r, p + r)


# Statistics of per-video sums. Event columns: [P numerator, P denominator, R numerator, R denominator] — per-video
# ratios and a 0/1 presence flag in "video" mode, matched/total event counts in "pooled" mode; the same formulas
# then give AutoDQ's averages or the pooled ratios.
EVENT_STATS = {
    "event_precision": lambda s: safe_ratio(s[..., 0], s[..., 1]),
    "event_recall": lambda s: safe_ratio(s[..., 2], s[..., 3]),
    "S_e": lambda s: f1(safe_ratio(s[..., 0], s[..., 1]), safe_ratio(s[..., 2], s[..., 3])),
}
SCENE_STATS = {"S_s": lambda s: safe_ratio(s[..., 0], s[..., 1])}  # [correct, counted questions]


def _buckets(items: pl.DataFrame | None, edges) -> pl.DataFrame | None:
    """video_id -> duration bucket from items (extra.duration, seconds)."""
    if items is None or "video_id" not in items.columns:
        return None

    def bucket(row: dict) -> str:
        try:
            extra = json.loads(row.get("extra") or "{}")
            duration = extra.get("duration")
            return duration_bucket(float(duration), edges) if duration is not None else "unknown"
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"items: video {row['video_id']!r}: unreadable extra/duration ({exc})") from exc

    cols = [c for c in ("video_id", "extra") if c in items.columns]
    rows = items.select(cols).unique(subset=["video_id"], keep="first").to_dicts()
    return pl.DataFrame({"video_id": [r["video_id"] for r in rows], "bucket": [bucket(r) for r in rows]},
                        schema={"video_id": pl.String, "bucket": pl.String})


def _prepare(verdicts: pl.DataFrame, items, edges) -> pl.DataFrame:
    missing = [c for c in ("video_id", "verdict") if c not in verdicts.columns]
    if missing:
        raise KeyError(f"verdict table lacks columns {missing} (have {verdicts.columns})")
    v = verdicts.with_columns(
        [pl.col(c).cast(pl.String).fill_null("-") if c in verdicts.columns else pl.lit("-").alias(c) for c in GROUP_COLUMNS]
        + ([] if "step" in verdicts.columns else [pl.lit(None, dtype=pl.String).alias("step")])
    )
    buckets = _buckets(items, edges)
    if buckets is None:
        return v.with_columns(pl.lit("unknown").alias("bucket"))
    return v.join(buckets, on="video_id", how="left").with_columns(pl.col("bucket").fill_null("unknown"))


def _unit_table(v: pl.DataFrame, paper_compatible: bool, event_average: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per (group, bucket, video) sums for the event and scene statistics, with row and no-verdict counts."""
    unit = GROUP_COLUMNS + ["bucket", "video_id"]
    ev = v.filter(pl.col("step").is_in(ENTAIL_STEPS))
    nv_e = (pl.col("verdict") < 0) | (pl.col("verdict") >= N_ENTAILMENT_CODES)
    matched = pl.col("verdict") == int(EntailmentVerdict.ENTAILMENT)
    per = ev.group_by(unit).agg(
        *[(matched & (pl.col("step") == s)).sum().cast(pl.Float64).alias(f"{s}_m") for s in ENTAIL_STEPS],
        *[(pl.col("step") == s).sum().cast(pl.Float64).alias(f"{s}_n") for s in ENTAIL_STEPS],
        *[(nv_e & (pl.col("step") == s)).sum().cast(pl.Float64).alias(f"{s}_nv") for s in ENTAIL_STEPS],
    )
    n_nv = pl.col("entail_p_nv") + pl.col("entail_r_nv")
    per = per.with_columns((pl.col("entail_p_n") + pl.col("entail_r_n")).alias("_n"), n_nv.alias("_nv"))
    if paper_compatible:  # AutoDQ drops the whole video when its judgment fails
        per = per.with_columns(pl.when(n_nv > 0).then(0.0).otherwise(pl.col(f"{s}_{k}")).alias(f"{s}_{k}")
                               for s in ENTAIL_STEPS for k in ("m", "n"))
    if event_average == "video":
        stats = []
        for s in ENTAIL_STEPS:
            has = pl.col(f"{s}_n") > 0
            stats += [pl.when(has).then(pl.col(f"{s}_m") / pl.col(f"{s}_n")).otherwise(0.0).alias(f"_s{len(stats)}"),
                      has.cast(pl.Float64).alias(f"_s{len(stats) + 1}")]
    elif event_average == "pooled":
        stats = []
        for s in ENTAIL_STEPS:
            stats += [pl.col(f"{s}_m").alias(f"_s{len(stats)}"), pl.col(f"{s}_n").alias(f"_s{len(stats) + 1}")]
    else:
        raise ValueError(f"event_average must be 'video' or 'pooled', got {event_average!r}")
    events = per.with_columns(stats)

    sc = v.filter(~pl.col("step").is_in(ENTAIL_STEPS) | pl.col("step").is_null())
    nv_s = (pl.col("verdict") < 0) | (pl.col("verdict") >= N_SCENE_CODES)
    correct = pl.col("verdict") == int(SceneQAVerdict.CORRECT)
    scene = sc.group_by(unit).agg(
        correct.sum().cast(pl.Float64).alias("_s0"),
        ((~nv_s).sum() + (0 if paper_compatible else nv_s.sum())).cast(pl.Float64).alias("_s1"),
        pl.len().cast(pl.Float64).alias("_n"), nv_s.sum().cast(pl.Float64).alias("_nv"),
    )
    return events, scene


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
    """S_s, S_e (+ event_precision, event_recall), percent, per group x bucket ("all" = every video).

    Group columns: captioner, prompt_id, frame_spec, bucket, mode. Strict rows give duration buckets and mode
    "strict" (or "paper" with paper_compatible, "/pooled" appended for pooled events); official rows (steps recall /
    precision / scene_qa) give mode "official" with AutoDQ's per-source ("source:<name>") and count buckets
    ("subjects<=1", "events in [4, 5]", ...) as well as duration buckets. `options` may hold the run's other
    protocol params (mode, prompts, event_prompts): the rows themselves say which flow made them."""
    del captions
    edges = duration_edges(duration_buckets)
    frames = []
    steps = set(verdicts["step"].drop_nulls().to_list()) if "step" in verdicts.columns else set()
    official_steps = {"recall", "precision", "scene_qa", "event_match"}
    if steps & official_steps:
        frames.append(_official_frame(verdicts, items, edges, n_resamples=n_resamples, seed=seed,
                                      confidence=confidence))
    strict = verdicts.filter(~pl.col("step").is_in(list(official_steps)) | pl.col("step").is_null()) \
        if "step" in verdicts.columns else verdicts
    strict = strict.filter(pl.col("step") != "extract") if "step" in strict.columns else strict
    if strict.height or not frames:
        frames.append(_strict_frame(strict, items, edges, n_resamples=n_resamples, seed=seed, confidence=confidence,
                                    paper_compatible=paper_compatible, event_average=event_average))
    del options
    out = pl.concat(frames, how="diagonal_relaxed")
    group_cols = GROUP_COLUMNS + ["bucket", "mode"]
    return out.select(group_cols + [c for c in out.columns if c not in group_cols])


def _strict_frame(verdicts, items, edges, *, n_resamples, seed, confidence, paper_compatible, event_average):
    v = _prepare(verdicts, items, edges)
    events, scene = _unit_table(v, paper_compatible, event_average)
    frames = []
    for units, n_stats, fns in ((scene, 2, SCENE_STATS), (events, 4, EVENT_STATS)):
        if units.height == 0:
            continue
        for by in (GROUP_COLUMNS + ["bucket"], GROUP_COLUMNS):
            table = sum_table(units, by, [f"_s{i}" for i in range(n_stats)])
            frame = metrics_frame(table, fns, n_resamples=n_resamples, seed=seed, confidence=confidence, scale=100.0,
                                  resample="per_group", nan_as_null=True)
            if "bucket" not in by:
                frame = frame.with_columns(pl.lit(ALL).alias("bucket"))
            frames.append(frame.select(GROUP_COLUMNS + ["bucket", "metric", "value", "ci_low", "ci_high", "n",
                                                        "n_no_verdict"]))
    if not frames:
        raise ValueError("the verdict table has no LVCap-Eval rows to score")
    mode = ("paper" if paper_compatible else "strict") + ("/pooled" if event_average == "pooled" else "")
    return pl.concat(frames, how="vertical").with_columns(pl.lit(mode).alias("mode"))


def _official_frame(verdicts, items, edges, *, n_resamples, seed, confidence) -> pl.DataFrame:
    v = verdicts.with_columns(
        [pl.col(c).cast(pl.String).fill_null("-") if c in verdicts.columns else pl.lit("-").alias(c)
         for c in GROUP_COLUMNS])
    info = autodq_metrics.clip_info(items)
    durations = _buckets(items, edges)
    bucket_of = dict(durations.iter_rows()) if durations is not None else {}
    rows = []
    clips = autodq_metrics.clip_scores(v, GROUP_COLUMNS)
    for key, part in clips.group_by(GROUP_COLUMNS, maintain_order=True):
        group = dict(zip(GROUP_COLUMNS, key))
        rows += autodq_metrics.metric_rows(part, info, group, n_resamples=n_resamples, seed=seed,
                                           confidence=confidence)
        by_duration = part.with_columns(pl.col("video_id").replace_strict(bucket_of, default="unknown")
                                        .alias("_dur"))
        for (dur,), sub in by_duration.group_by(["_dur"], maintain_order=True):
            t = autodq_metrics.summarize(sub.drop("_dur"), {k: {**i, "source": "all"} for k, i in info.items()})
            o = t["overall"]
            for metric, k in (("S_e", "f1"), ("event_recall", "recall"), ("event_precision", "precision")):
                rows.append({**group, "bucket": f"duration:{dur}", "metric": metric,
                             "value": None if not np.isfinite(o[k]) else 100.0 * o[k], "ci_low": None,
                             "ci_high": None, "n": o["success"], "n_no_verdict": o["failed"]})
    rows += _official_scene_rows(v, bucket_of)
    schema = {**{c: pl.String for c in GROUP_COLUMNS}, "bucket": pl.String, "metric": pl.String,
              "value": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "n": pl.Int64,
              "n_no_verdict": pl.Int64}
    autodq = pl.DataFrame(rows, schema=schema).with_columns(
        pl.when(pl.col("metric").str.starts_with("S_s")).then(None).otherwise(pl.lit("autodq"))
        .alias("event_scoring"),
        pl.when(pl.col("metric").str.starts_with("S_s")).then(None).otherwise(pl.lit(autodq_metrics.AUTODQ_READING))
        .alias("reading"))
    paper = paper_metrics.frame(v, items, bucket_of, GROUP_COLUMNS, n_resamples=n_resamples, seed=seed,
                                confidence=confidence)
    parts = [autodq] + ([paper.select(autodq.columns)] if paper is not None else [])
    return pl.concat(parts, how="vertical_relaxed").with_columns(pl.lit("official").alias("mode"))


def _official_scene_rows(v: pl.DataFrame, bucket_of: dict) -> list[dict]:
    """S_s from Prompt4 replies: one row per (group, video) with the correct / question counts in detail."""
    sc = v.filter(pl.col("step") == "scene_qa")
    out = []
    for key, part in sc.group_by(GROUP_COLUMNS, maintain_order=True):
        group = dict(zip(GROUP_COLUMNS, key))
        per_bucket: dict[str, list] = {}
        for rec in part.iter_rows(named=True):
            ok = rec["verdict"] is not None and rec["verdict"] >= 0 and rec["detail"]
            d = json.loads(rec["detail"]) if ok else None
            entry = (d["correct"], d["questions"]) if ok and d["questions"] else None
            for b in (ALL, f"duration:{bucket_of.get(rec['video_id'], 'unknown')}"):
                per_bucket.setdefault(b, []).append(entry)
        for b, entries in per_bucket.items():
            ok = [e for e in entries if e is not None]
            nv = len(entries) - len(ok)
            mean = float(np.mean([c / q for c, q in ok])) * 100.0 if ok else None
            pooled = 100.0 * sum(c for c, _ in ok) / sum(q for _, q in ok) if ok else None
            out += [{**group, "bucket": b, "metric": "S_s", "value": mean, "ci_low": None, "ci_high": None,
                     "n": len(ok), "n_no_verdict": nv},
                    {**group, "bucket": b, "metric": "S_s_pooled", "value": pooled, "ci_low": None,
                     "ci_high": None, "n": len(ok), "n_no_verdict": nv}]
    return out
