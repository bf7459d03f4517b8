"""VC-Inspector's paired statistic for `capeval compare`: score counts per video; the mean score of their sums (on
the 1-5 scale, not in percent)."""

from __future__ import annotations

from capeval.engine.metrics.paired import PairedSpec, code_stats

from .codes import N_CODES
from .metrics import mean_score


def paired_spec(mode: str) -> PairedSpec:
    return PairedSpec(code_stats(N_CODES), N_CODES + 1, {"mean_score": mean_score}, scale=1.0)
