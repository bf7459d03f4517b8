"""Content-addressed judgment cache: request_key -> the judge's raw response.

request_key = content_key(judge name, judge revision, system, user, images digest, sampling params, seed) is
computed when requests are built (engine.protocols.base.request_key), so the same rendered prompt to the same judge
weights with the same sampling is answered once, by any run, in any order.

Why SQLite in WAL mode (not Parquet segments): the cache is a point-lookup map that grows one batch at a time and is
read before every batch. SQLite gives an indexed primary key (lookups of a few thousand keys out of millions without
reading everything), atomic multi-row commits (a batch is in or not), `INSERT OR IGNORE` (no duplicates even if two
workers answer the same key) and, in WAL mode, readers that never block the single writer. A commit in WAL mode with
synchronous=NORMAL survives a kill -9 of the process (only an OS crash/power loss can lose the last commits); so a
killed run keeps every batch it committed and a rerun asks only for the rest. Only successful responses are stored:
backend errors are retried by the next run instead of being cached.
Stage *outputs* (verdict tables) go to the Parquet segment store instead (engine.store.segments).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

_SCHEMA = """
CREATE TABLE IF NOT EXISTS judgments (
    request_key TEXT PRIMARY KEY,
    judge TEXT NOT NULL,
    text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    cached_prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    latency_s REAL NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    created REAL NOT NULL
) WITHOUT ROWID
"""
_COLUMNS = ("request_key", "judge", "text", "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
            "latency_s", "cost_usd")
_LOOKUP_CHUNK = 500  # stay below SQLite's bound-parameter limit


@dataclass(frozen=True)
class CachedResponse:
    request_key: str
    judge: str
    text: str
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0


class JudgmentCache:
    """SQLite (WAL) file `<cache_dir>/judgments.sqlite`. One instance per process; safe across processes."""

    FILENAME = "judgments.sqlite"

    def __init__(self, cache_dir: str | Path):
        self.dir = Path(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / self.FILENAME
        self._db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=60000")
        self._db.execute(_SCHEMA)

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedResponse]:
        keys = list(dict.fromkeys(keys))
        found: dict[str, CachedResponse] = {}
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM judgments WHERE request_key IN ({marks})", chunk
            ).fetchall()
            for row in rows:
                found[row[0]] = CachedResponse(*row)
        return found

    def put_many(self, responses: Sequence[CachedResponse]) -> int:
        """Store a finished batch in one transaction; keys already present are kept (first answer wins)."""
        if not responses:
            return 0
        now = time.time()
        rows = [tuple(getattr(r, c) for c in _COLUMNS) + (now,) for r in responses]
        with self._transaction():
            cur = self._db.executemany(
                f"INSERT OR IGNORE INTO judgments ({', '.join(_COLUMNS)}, created) VALUES ({','.join('?' * 9)})", rows
            )
        return cur.rowcount

    def __contains__(self, key: str) -> bool:
        return self._db.execute("SELECT 1 FROM judgments WHERE request_key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM judgments").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "JudgmentCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _transaction(self):
        db = self._db

        class _Tx:
            def __enter__(self_inner):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self_inner, exc_type, exc, tb):
                db.execute("ROLLBACK" if exc_type else "COMMIT")
                return False

        return _Tx()
