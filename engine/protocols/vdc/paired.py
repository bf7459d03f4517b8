"""VDC's paired statistic for `capeval compare` (and `capeval judge validate`): per (video, kind), the video's
accuracy and whether it enters its kind's mean, so that Acc of the sums is the kind's Acc as the metrics table gives
it (the mean over videos of each video's share of 'yes'), and its mean over the kinds compared
(`compare_average_over = "task"`) is VDCscore when all five kinds are there.

strict: every video with a verdict counts; its accuracy is over its questions with a verdict.
official: the official per-video rule (metrics.py): a video with a question without a verdict is skipped, and one
whose accuracy or score is exactly 0 is dropped. The score is read from the row's `detail` (`score_float`); rows
without a `detail` column (a validation table carries verdict codes only) are held to the accuracy test alone."""

from __future__ import annotations

import polars as pl

from capeval.engine.metrics.core import safe_ratio
from capeval.engine.metrics.paired import PairedSpec

from .codes import VDCVerdict

#: columns that tell two systems', cells' or videos' rows apart, where present
IDENTITY = ("cell_key", "dataset", "protocol", "judge", "captioner", "prompt_id", "frame_spec", "caption_key",
            "_task", "video_id")


def paired_spec(mode: str) -> PairedSpec:
    official = mode == "official"

    def stats(v: pl.DataFrame, opts: dict) -> pl.DataFrame:
        if "step" in v.columns:  # the answer step carries no verdict of its own
            v = v.filter(pl.col("step").is_null() | (pl.col("step") != "answer"))
        has_verdict = (pl.col("verdict") >= 0) & (pl.col("verdict") <= int(VDCVerdict.YES))
        score = (pl.col("detail").str.json_path_match("$.score_float").cast(pl.Float64, strict=False)
                 if "detail" in v.columns else pl.lit(None, dtype=pl.Float64))
        # one unit per (system, video, kind): every column that tells systems apart is kept, since the report's rank
        # agreement and `compare --across` group the statistic by system
        unit = [c for c in IDENTITY if c in v.columns]
        per = v.group_by(unit, maintain_order=True).agg(
            pl.len().alias("_n"), has_verdict.sum().alias("_answered"),
            (pl.col("verdict") == int(VDCVerdict.YES)).sum().alias("_yes"),
            score.sum().alias("_score"), score.is_null().any().alias("_no_score"))
        if official:
            acc = pl.col("_yes") / pl.col("_n")
            tp_score = pl.when(pl.col("_no_score")).then(None).otherwise(pl.col("_score") / pl.col("_n"))
            # nan is truthy, as in `if tp_score and tp_acc`: only an exact 0 drops
            kept = (pl.col("_answered") == pl.col("_n")) & (acc != 0) & (tp_score.is_null() | (tp_score != 0))
        else:
            acc = pl.col("_yes") / pl.col("_answered")
            kept = pl.col("_answered") > 0
        return per.with_columns(pl.when(kept).then(acc).otherwise(0.0).alias("_s0"),
                                kept.cast(pl.Float64).alias("_s1"))

    return PairedSpec(stats, 2, {"Acc": lambda s: safe_ratio(s[..., 0], s[..., 1])})
