"""VidCapBench's paired statistic for `capeval compare`: score-step verdict counts per video (the answer step
carries no verdict of its own); Acc/Pre/Cov/Con of their sums."""

from __future__ import annotations

from capeval.engine.metrics.paired import PairedSpec, code_stats

from .codes import N_CODES
from .metrics import metric_functions


def paired_spec(mode: str) -> PairedSpec:
    # official mode leaves unscored pairs out of every count, as "paper" does (metrics.py)
    return PairedSpec(code_stats(N_CODES, ("answer",)), N_CODES + 1,
                      metric_functions(paper_compatible=mode in ("paper", "official")))
