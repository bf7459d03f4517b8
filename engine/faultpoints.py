"""Kill points for the fault suite (tests/faults) and chaos drills, the one fault-injection mechanism:
`CAPEVAL_KILL_AT=<point>[@<n>]` makes the process SIGKILL itself the n-th time (default 1st) it passes `<point>`: a
real kill -9 at a known place, with no chance to clean up.

Points: `decode` (the driver received a video's frames), `caption` (a caption was stored; counted per caption,
so `caption@N` kills once the batch holding the N-th caption is stored), `caption_call` (a caption actor starts a
call: the actor's process dies, Ray restarts it and the stage re-sends what it lost),
`cell_verdicts` (a cell's verdicts are written, its metrics not yet), `commit:<store folder>` (a group-committed
store such as `captions` wrote its buffered rows), `compact` (a merged segment is in place, its parts not yet
unlinked), `write:<file name>` (e.g. `write:results.parquet`: the file's temp copy is written and synced, not yet
renamed into place).

`CAPEVAL_KILL_ONCE=<file>` makes it one kill across processes: a point kills only while that file exists, and
removes it first (a Ray actor that Ray restarts after the kill passes the point unharmed). The driver hands these
variables to the actors it starts (`actor_env`), so a point inside an actor works on any cluster. Without the
variables `hit` is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import signal

KILL_AT = "CAPEVAL_KILL_AT"
KILL_ONCE = "CAPEVAL_KILL_ONCE"

_COUNTS: dict[str, int] = {}


def hit(point: str) -> None:
    spec = os.environ.get(KILL_AT)
    if not spec:
        return
    name, _, nth = spec.partition("@")
    if name != point:
        return
    _COUNTS[point] = _COUNTS.get(point, 0) + 1
    if _COUNTS[point] < int(nth or 1):
        return
    once = os.environ.get(KILL_ONCE)
    if once:
        try:
            os.remove(once)  # whoever removes it is the one process that dies
        except FileNotFoundError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def actor_env() -> dict[str, str]:
    """The kill-point variables set in this process, for the Ray actors it starts (a `runtime_env`'s env_vars);
    empty when none is set (actors then start as they always do)."""
    return {k: os.environ[k] for k in (KILL_AT, KILL_ONCE) if os.environ.get(k)}
