"""CAPability's paired statistic for `capeval compare`: verdict-code counts per (video, task); precision, recall,
f1 and hit rate of their sums in the run's mode (official unless it says strict). compare averages the per-task
values (the protocol's `compare_average_over = "task"`)."""

from __future__ import annotations

from capeval.engine.metrics.paired import PairedSpec, code_stats

from .codes import N_CODES
from .metrics import METRIC_FUNCTIONS


def paired_spec(mode: str) -> PairedSpec:
    mode = mode if mode in ("official", "strict") else "official"
    return PairedSpec(code_stats(N_CODES), N_CODES + 1,
                      {m: (lambda c, fn=fn: fn(c, mode)) for m, fn in METRIC_FUNCTIONS.items()})
