"""When a group-committed SegmentStore (engine/store/segments.py) writes its buffered rows, and when it merges its
small segments. The sweep's stores take the defaults, which `CAPEVAL_STORE_COMMIT` can override (an operator's knob
for very fast or very slow file systems; the fault suite sets small sizes to make commits and merges happen often)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from capeval.engine.errors import UsageError

COMMIT_ENV = "CAPEVAL_STORE_COMMIT"


@dataclass(frozen=True)
class GroupCommit:
    """When buffered appends become a segment, and when trailing small segments are merged."""

    rows: int = 512
    interval_s: float = 2.0
    compact_after: int = 8
    compact_bytes: int = 32 << 20

    @classmethod
    def from_env(cls, environ=None) -> "GroupCommit":
        """The defaults, with `CAPEVAL_STORE_COMMIT` (`rows=N,interval_s=X,compact_after=N,compact_bytes=N`)
        applied; a malformed value is a usage error naming the variable and the field."""
        text = (os.environ if environ is None else environ).get(COMMIT_ENV, "").strip()
        if not text:
            return cls()
        values: dict = {}
        kinds = {"rows": int, "interval_s": float, "compact_after": int, "compact_bytes": int}
        for part in text.split(","):
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep or key not in kinds:
                raise UsageError(f"{COMMIT_ENV}={text!r}: {part.strip()!r} is not one of "
                                 f"{', '.join(k + '=...' for k in kinds)}")
            try:
                value = kinds[key](raw.strip())
            except ValueError:
                raise UsageError(f"{COMMIT_ENV}: {key} = {raw.strip()!r} is not a {kinds[key].__name__}") from None
            if not value > 0 or (key == "compact_after" and value < 2):
                raise UsageError(f"{COMMIT_ENV}: {key} = {raw.strip()} must be "
                                 + ("at least 2" if key == "compact_after" else "positive"))
            values[key] = value
        return cls(**values)
