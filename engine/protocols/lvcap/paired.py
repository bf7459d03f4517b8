"""LVCap's paired statistic for `capeval compare`: per video, matched/total events each way (averaged over videos,
as lvcap's default; mode ".../pooled": pooled over videos) and scene answers; S_e and S_s of their sums."""

from __future__ import annotations

import polars as pl

from capeval.engine.metrics.core import f1, safe_ratio
from capeval.engine.metrics.paired import PairedSpec

from .codes import N_ENTAILMENT_CODES, N_SCENE_CODES, EntailmentVerdict, SceneQAVerdict
from .metrics import ENTAIL_STEPS


def paired_spec(mode: str) -> PairedSpec:
    """Per video: matched/total events each way (averaged over videos, as lvcap's default) and scene answers."""
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
        return lambda s: safe_ratio(s[..., a], s[..., b])

    def s_e(s):
        return f1(ratio(0, 1)(s), ratio(2, 3)(s))

    return PairedSpec(stats, 6, {"S_e": s_e, "S_s": ratio(4, 5)})
