"""Content keys: every stage output is keyed by a hash of everything that determines it.

A key is the hex SHA-256 of a canonical JSON encoding (sorted keys, no whitespace, UTF-8), so the same
inputs, config and model give the same key on any machine and in any run order.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if hasattr(value, "__dict__"):
        return vars(value)
    raise TypeError(f"cannot make a content key from {type(value).__name__}")


def content_key(*parts: Any, length: int = 32) -> str:
    """Hex key of `parts`; `length` hex chars (128 bits by default) keep Parquet key columns small."""
    digest = hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()
    return digest[:length]


def file_digest(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes (videos are keyed by content, not by path)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()[:32]


def derived_seed(*parts: Any) -> int:
    """A stable 63-bit seed from content (e.g. an item id), independent of run order."""
    return int(hashlib.sha256(canonical_json(list(parts)).encode("utf-8")).hexdigest()[:15], 16)
