"""Durable stage outputs: a Parquet segment store (append = one new small file, atomically) and the content-addressed
judgment cache. Nothing here rewrites a whole results file per item."""

from .judgment_cache import CachedResponse, JudgmentCache
from .segments import SegmentStore

__all__ = ["SegmentStore", "JudgmentCache", "CachedResponse"]
