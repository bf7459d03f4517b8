"""Fewer garbage-collector passes during bulk work (a sweep's checks and run, a judging run).

CPython's default thresholds (700, 10, 10) start a young-generation pass every 700 container allocations. The item
readers, the checks and the judge loop allocate hundreds of thousands of short-lived dicts, tuples and rows, almost
all freed by reference counting, so nearly every pass finds nothing to collect, while the full passes walk the whole
heap of a large run: in a 25,000-request scale sweep (`capeval bench sweep --scale`) the passes took a quarter of
the process's CPU time, and each full pass held the judge loop for 0.3-1.4 s (the loopback server saw its window of
512 requests half empty meanwhile). `bulk_gc()` raises the first threshold while the work runs, so passes come
~70 times less often and free the rare cycles a little later, and gives the caller's thresholds back when it ends
(each nested use restores what it found). A caller that turned collection off or set a higher threshold keeps it.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

#: (allocations between young passes, young passes between middle passes, middle passes between full passes)
BULK_THRESHOLDS = (50_000, 20, 10)


@contextlib.contextmanager
def bulk_gc() -> Iterator[None]:
    """Usable as a context manager or as a decorator (`@bulk_gc()`)."""
    before = gc.get_threshold()
    if before[0] == 0 or before[0] >= BULK_THRESHOLDS[0]:
        yield
        return
    gc.set_threshold(*BULK_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
