"""VDC's paired statistic for `capeval compare`: score-step verdict counts per video (the answer step carries no
verdict of its own); Acc = the share of 'yes' over the questions with a verdict, pooled over videos."""

from __future__ import annotations

from capeval.engine.metrics.core import code_share
from capeval.engine.metrics.paired import PairedSpec, code_stats

from .codes import N_CODES, VDCVerdict


def paired_spec(mode: str) -> PairedSpec:
    del mode  # both modes compare the same pooled share; the official per-video rules are metrics.py's
    yes, no = int(VDCVerdict.YES), int(VDCVerdict.NO)
    return PairedSpec(code_stats(N_CODES, ("answer",)), N_CODES + 1,
                      {"Acc": lambda c: code_share(c, (yes,), (yes, no))})
