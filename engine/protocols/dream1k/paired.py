"""DREAM-1K's paired statistic for `capeval compare`: per clip recall and precision, resampled by video.

* official mode (steps recall / precision): per video, the sum of its successful clips' recall and precision
  scores (from the verdict details: hits / events, 1.0 for an empty list) and their count; recall and precision
  are the means over successful clips, F1 of the means. A Failed clip (either step rejected) is left out, as the
  official code leaves it out. The official overall averages per source first; a comparison pairs the same videos,
  whose sources are the same on both sides, and reads the clip means (pooled over sources).
* strict mode (steps entail_r / entail_p, lvcap's strict flow): per video, entailed / judged events each way,
  as a ratio averaged over videos (`.../pooled`: pooled over videos; `paper...`: a video with an unjudged event
  left out), F1 of the averages, as metrics.py's strict numbers.
"""

from __future__ import annotations

import json

import polars as pl

from capeval.engine.metrics.core import f1, safe_ratio
from capeval.engine.metrics.paired import PairedSpec

OFFICIAL_STEPS = ("recall", "precision")
STRICT_STEPS = ("entail_p", "entail_r")


def _ratio(a: int, b: int):
    return lambda s: safe_ratio(s[..., a], s[..., b])


METRICS = {"F1": lambda s: f1(_ratio(0, 1)(s), _ratio(2, 3)(s)), "precision": _ratio(0, 1), "recall": _ratio(2, 3)}


def _official_stats(v: pl.DataFrame) -> pl.DataFrame:
    """Per (video, _task): [sum of precision scores, successful clips, sum of recall scores, successful clips]."""
    clips: dict[tuple, dict] = {}
    trial = "trial" if "trial" in v.columns else None
    for rec in v.filter(pl.col("step").is_in(list(OFFICIAL_STEPS))).iter_rows(named=True):
        key = (rec["video_id"], rec["_task"], rec["item_id"], rec[trial] if trial else 0)
        ok = rec["verdict"] is not None and rec["verdict"] >= 0 and bool(rec["detail"])
        clips.setdefault(key, {})[rec["step"]] = float(json.loads(rec["detail"])["score"]) if ok else None
    rows = []
    for (video, task, _, _), scores in clips.items():
        p, r = scores.get("precision"), scores.get("recall")
        success = p is not None and r is not None
        rows.append({"video_id": video, "_task": task, "_s0": p if success else 0.0, "_s1": float(success),
                     "_s2": r if success else 0.0, "_s3": float(success)})
    return pl.DataFrame(rows, schema={"video_id": v.schema["video_id"], "_task": pl.String, "_s0": pl.Float64,
                                      "_s1": pl.Float64, "_s2": pl.Float64, "_s3": pl.Float64})


def _strict_stats(v: pl.DataFrame, *, paper: bool, pooled: bool) -> pl.DataFrame:
    """Per (video, _task): precision then recall, each [entailed, events] (pooled) or [ratio, 1 if any event]."""
    step = pl.col("step")
    judged = (pl.col("verdict") >= 0).fill_null(False) & pl.col("detail").is_not_null()
    entailed = judged & (pl.col("detail").str.json_path_match("$.label") == "entailment").fill_null(False)
    cols = []
    for i, s in enumerate(STRICT_STEPS):
        cols += [((step == s) & entailed).cast(pl.Float64).alias(f"_m{i}"),
                 (step == s).fill_null(False).cast(pl.Float64).alias(f"_n{i}"),
                 ((step == s) & ~judged).fill_null(False).cast(pl.Float64).alias(f"_u{i}")]
    per = v.filter(step.is_in(list(STRICT_STEPS))).with_columns(cols).group_by(["video_id", "_task"]).agg(
        pl.col("_m0", "_n0", "_u0", "_m1", "_n1", "_u1").sum())
    if paper:  # as lvcap's paper-compatible reading: a video with an unjudged event is left out
        bad = (pl.col("_u0") + pl.col("_u1")) > 0
        per = per.with_columns(pl.when(bad).then(0.0).otherwise(pl.col(c)).alias(c)
                               for c in ("_m0", "_n0", "_m1", "_n1"))
    if pooled:
        return per.select("video_id", "_task", pl.col("_m0").alias("_s0"), pl.col("_n0").alias("_s1"),
                          pl.col("_m1").alias("_s2"), pl.col("_n1").alias("_s3"))
    out = []
    for i in range(2):
        has = pl.col(f"_n{i}") > 0
        out += [pl.when(has).then(pl.col(f"_m{i}") / pl.col(f"_n{i}")).otherwise(0.0).alias(f"_s{2 * i}"),
                has.cast(pl.Float64).alias(f"_s{2 * i + 1}")]
    return per.select("video_id", "_task", *out)


def paired_spec(mode: str) -> PairedSpec:
    """The spec for a run's metrics mode: "official", or lvcap's strict modes ("strict", "paper", ".../pooled")."""
    if mode == "official":
        return PairedSpec(lambda v, opts: _official_stats(v), 4, METRICS)
    paper, pooled = mode.startswith("paper"), mode.endswith("/pooled")
    return PairedSpec(lambda v, opts: _strict_stats(v, paper=paper, pooled=pooled), 4, METRICS)
