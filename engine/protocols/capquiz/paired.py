"""CapQuiz's paired statistic for `capeval compare`: verdict-code counts per video; CapP/CapR/CapF1 of their sums
(paper mode: the paper-compatible formulas, metrics.metric_functions)."""

from __future__ import annotations

from capeval.engine.metrics.paired import PairedSpec, code_stats

from .codes import N_CODES
from .metrics import metric_functions


def paired_spec(mode: str) -> PairedSpec:
    return PairedSpec(code_stats(N_CODES), N_CODES + 1, metric_functions(paper_compatible=mode == "paper"))
