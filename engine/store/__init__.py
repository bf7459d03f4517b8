"""Durable stage outputs: a Parquet segment store (appends written atomically, optionally group-committed and
compacted) and the content-addressed judgment cache. Nothing here rewrites a whole results file per item."""

from .judgment_cache import CachedResponse, JudgmentCache
from .group_commit import GroupCommit
from .segments import SegmentStore

__all__ = ["SegmentStore", "GroupCommit", "JudgmentCache", "CachedResponse"]
