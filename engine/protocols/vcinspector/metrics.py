"""VC-Inspector metrics: the mean judge score (1-5) per group, with a video-clustered bootstrap CI.

Protocol (Dipta, Wu and Tripathi, "VC-Inspector: Advancing Reference-free Evaluation of Video Captions with
Factual Analysis", ACL 2026, arXiv 2509.16538): a multimodal judge sees the video and the caption and gives a
quality score from 1 to 5 (code = score − 1, see codes.py), with an explanation. The paper reports how well the
scores correlate with human ratings (Kendall τ_b / τ_c, Spearman ρ on VATEX-Eval): see engine/metrics/alignment.py.

    mean_score = Σ_k k · n_k / Σ_k n_k        (k = 1..5)
    share_k    = n_k / Σ n (percent), for k = 1..5 (the score distribution)

A row without a verdict has no score to average, so the mean is over scored rows in both modes; rows without a
verdict are counted in `n_no_verdict` next to every metric. The only difference `paper_compatible=True` (or the run
param `mode="official"`, labelled "official") makes is the share_k denominators: strict mode keeps unscored rows in
them (shares then sum to less than 100), paper / official mode does not. Group columns: captioner, prompt_id, frame_spec, category (items.category when items are given, else "all").
"""

from __future__ import annotations

import numpy as np
import polars as pl

from capeval.engine.metrics.core import count_table, metrics_frame

from .codes import N_CODES

SCORES = np.arange(1, N_CODES + 1, dtype=np.float64)  # code k -> score k + 1
GROUP_COLUMNS = ["captioner", "prompt_id", "frame_spec"]
ALL = "all"


def mean_score(counts) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    n = c[..., :N_CODES].sum(axis=-1)
    total = (c[..., :N_CODES] * SCORES).sum(axis=-1)
    out = np.full(n.shape, np.nan)
    np.divide(total, n, out=out, where=n > 0)
    return out


def score_share(score: int, *, include_no_verdict: bool = True):
    if score not in range(1, N_CODES + 1):
        raise ValueError(f"VC-Inspector scores are 1-{N_CODES}; got {score}")

    def share(counts) -> np.ndarray:
        c = np.asarray(counts, dtype=np.float64)
        n = c[..., : N_CODES + (1 if include_no_verdict else 0)].sum(axis=-1)
        out = np.full(n.shape, np.nan)
        np.divide(c[..., score - 1], n, out=out, where=n > 0)
        return out

    return share


def compute_metrics(
    verdicts: pl.DataFrame,
    *,
    items: pl.DataFrame | None = None,
    captions: pl.DataFrame | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    paper_compatible: bool = False,
    confidence: float = 0.95,
    **options,
) -> pl.DataFrame:
    del captions
    official = options.get("mode") == "official"
    paper_compatible = paper_compatible or official
    missing = [c for c in ("video_id", "verdict") if c not in verdicts.columns]
    if missing:
        raise KeyError(f"verdict table lacks columns {missing} (have {verdicts.columns})")
    v = verdicts.with_columns(
        [pl.col(c).cast(pl.String).fill_null("-") if c in verdicts.columns else pl.lit("-").alias(c) for c in GROUP_COLUMNS]
    )
    if items is not None and "category" in items.columns and "item_id" in v.columns:
        keys = [k for k in ("task", "item_id") if k in items.columns and k in v.columns]
        cats = items.select(*keys, pl.col("category")).unique(subset=keys, keep="first")
        v = v.join(cats, on=keys, how="left").with_columns(pl.col("category").fill_null("unknown"))
        levels = [["category"], []]
    else:
        levels = [[]]
    mode = "official" if official else "paper" if paper_compatible else "strict"
    inc = not paper_compatible
    frames = []
    for extra in levels:
        table = count_table(v, GROUP_COLUMNS + extra, N_CODES)
        options = dict(n_resamples=n_resamples, seed=seed, confidence=confidence, resample="per_group",
                       nan_as_null=True)
        mean = metrics_frame(table, {"mean_score": mean_score}, scale=1.0, **options)
        share_fns = {f"share_{k}": score_share(k, include_no_verdict=inc) for k in range(1, N_CODES + 1)}
        shares = metrics_frame(table, share_fns, scale=100.0, **options)
        frame = pl.concat([mean, shares.select(mean.columns)], how="vertical")
        if "category" not in frame.columns:
            frame = frame.with_columns(pl.lit(ALL).alias("category"))
        frames.append(frame)
    out = pl.concat([f.select(frames[0].columns) for f in frames], how="vertical").with_columns(pl.lit(mode).alias("mode"))
    group_cols = GROUP_COLUMNS + ["category", "mode"]
    return out.select(group_cols + [c for c in out.columns if c not in group_cols])
