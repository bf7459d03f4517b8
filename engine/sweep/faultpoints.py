"""Kill points for the fault suite (tests/faults): `CAPEVAL_KILL_AT=<point>[@<n>]` makes the process SIGKILL itself
the n-th time (default 1st) it passes `<point>`: a real kill -9 at a known place, with no chance to clean up.

Points: `decode` (the driver received a video's frames), `caption` (a caption batch was stored), `cell_verdicts`
(a cell's verdicts are written, its metrics not yet), `commit:<store folder>` (a group-committed store such as
`captions` wrote its buffered rows), `compact` (a merged segment is in place, its parts not yet unlinked),
`write:<file name>` (e.g. `write:results.parquet`: the
file's temp copy is written and synced, not yet renamed into place). Without the variable `hit` is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import signal

_COUNTS: dict[str, int] = {}


def hit(point: str) -> None:
    spec = os.environ.get("CAPEVAL_KILL_AT")
    if not spec:
        return
    name, _, nth = spec.partition("@")
    if name != point:
        return
    _COUNTS[point] = _COUNTS.get(point, 0) + 1
    if _COUNTS[point] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
