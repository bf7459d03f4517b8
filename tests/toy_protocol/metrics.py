"""The toy protocol's metrics: mention_rate = YES / (YES + NO + no verdict), in percent, per (captioner, prompt_id,
frame_spec), with a video-clustered bootstrap interval (capeval.engine.metrics.core)."""

from __future__ import annotations

import numpy as np
import polars as pl

from capeval.engine.metrics.core import count_table, metrics_frame

GROUP_COLUMNS = ["captioner", "prompt_id", "frame_spec"]
N_CODES = 2  # NO, YES (the package's MentionVerdict)


def mention_rate(counts) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    n = c.sum(axis=-1)  # rows without a verdict stay in the denominator: a failure is never a mention
    out = np.full(n.shape, np.nan)
    np.divide(c[..., 1], n, out=out, where=n > 0)
    return out


def compute_metrics(verdicts: pl.DataFrame, *, n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95,
                    **_options) -> pl.DataFrame:
    v = verdicts.with_columns([pl.col(c).cast(pl.String).fill_null("-") if c in verdicts.columns
                               else pl.lit("-").alias(c) for c in GROUP_COLUMNS])
    table = count_table(v, GROUP_COLUMNS, N_CODES)
    return metrics_frame(table, {"mention_rate": mention_rate}, n_resamples=n_resamples, seed=seed,
                         confidence=confidence, resample="per_group", nan_as_null=True)
