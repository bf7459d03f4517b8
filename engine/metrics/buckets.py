"""Duration buckets of long videos in minutes ("<2min", "2-5min", "6-10min", "11-15min", "16-20min", ">20min", as
long-video caption benchmarks label them), shared by a protocol's metrics and the generic `--by duration_bucket`
breakdown so that both label a video the same way (a protocol may import capeval.engine.metrics; the generic engine
may not import a protocol).
"""

from __future__ import annotations

import math

UNKNOWN = "unknown"
#: the default edges: 2-5, 6-10, 11-15, 16-20 minutes
PAPER_DURATION_EDGES = (2.0, 5.0, 10.0, 15.0, 20.0)


def duration_edges(value, *, what: str = "duration_buckets") -> tuple[float, ...]:
    """Bucket edges in minutes from a param (numbers, or text like "2,5,10,15,20"); None: the paper's.
    `what` names the param in the error message."""
    if value is None:
        return PAPER_DURATION_EDGES
    parts = value.split(",") if isinstance(value, str) else list(value)
    try:
        edges = tuple(float(x) for x in parts)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected edges in minutes such as 2,5,10,15,20; got {value!r}") from None
    if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"{what}: need at least 2 increasing edges (minutes); got {value!r}")
    return edges


def duration_bucket(seconds: float | None, edges=PAPER_DURATION_EDGES) -> str:
    """[e0, e1], (e1, e2], ... minutes, labelled as the paper labels whole minutes ("2-5min", "6-10min": a bucket
    after the first starts one minute above the previous edge when that edge is whole); "unknown" without a
    finite duration."""
    if seconds is None or not math.isfinite(seconds):
        return UNKNOWN
    minutes = seconds / 60.0
    if minutes < edges[0]:
        return f"<{edges[0]:g}min"
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
        if minutes <= b:
            low = a if i == 0 or not float(a).is_integer() else a + 1
            return f"{low:g}-{b:g}min"
    return f">{edges[-1]:g}min"
