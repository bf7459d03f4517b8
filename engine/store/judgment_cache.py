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

One writer per key (issue 8): processes that share a cache never pay twice for one key. Before sending, a process
`claim`s its keys in the `claims` table (pid, host, time) in the same transaction that re-checks `judgments`; a key
another live process has claimed is waited for (`poll`) instead of sent. A claim whose pid is dead (same host) or
that is older than `claim_timeout_s` is taken over, so a killed run never blocks the next one. Claims are released
in the transaction that stores the answers (`put_many(..., release=...)`) or with `release` after a failure.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from dataclasses import dataclass, field
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
_CLAIMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    request_key TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
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


@dataclass
class ClaimResult:
    """Outcome of `JudgmentCache.claim` for a set of keys."""

    found: dict[str, "CachedResponse"] = field(default_factory=dict)  # answered already: do not send
    claimed: list[str] = field(default_factory=list)  # ours now: send them
    held: dict[str, tuple[int, str]] = field(default_factory=dict)  # key -> (pid, host) of a live claimant: wait


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class JudgmentCache:
    """SQLite (WAL) file `<cache_dir>/judgments.sqlite`. One instance per thread; safe across processes."""

    FILENAME = "judgments.sqlite"
    CLAIM_TIMEOUT_S = 900.0  # a claim older than this is taken over even if its process seems alive

    def __init__(self, cache_dir: str | Path, *, claim_timeout_s: float | None = None):
        self.dir = Path(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / self.FILENAME
        self.claim_timeout_s = self.CLAIM_TIMEOUT_S if claim_timeout_s is None else float(claim_timeout_s)
        self.pid, self.host = os.getpid(), socket.gethostname()
        self._db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=60000")
        self._db.execute(_SCHEMA)
        self._db.execute(_CLAIMS_SCHEMA)

    # -- one writer per key ---------------------------------------------------------------------------------------

    def claim(self, keys: Iterable[str]) -> ClaimResult:
        """In one transaction: keys already answered come back in `found`; the others are claimed for this process
        unless a live process holds a fresh claim on them (`held`: wait for it, see `poll`)."""
        keys = list(dict.fromkeys(keys))
        out = ClaimResult()
        if not keys:
            return out
        now = time.time()
        with self._transaction():
            for start in range(0, len(keys), _LOOKUP_CHUNK):
                chunk = keys[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))
                for row in self._db.execute(
                        f"SELECT {', '.join(_COLUMNS)} FROM judgments WHERE request_key IN ({marks})", chunk):
                    out.found[row[0]] = CachedResponse(*row)
                rest = [k for k in chunk if k not in out.found]
                if not rest:
                    continue
                marks = ",".join("?" * len(rest))
                holders = {r[0]: r[1:] for r in self._db.execute(
                    f"SELECT request_key, pid, host, created FROM claims WHERE request_key IN ({marks})", rest)}
                take = []
                for k in rest:
                    h = holders.get(k)
                    if h is None or self._stale(*h, now) or (h[0] == self.pid and h[1] == self.host):
                        take.append((k, self.pid, self.host, now))
                    else:
                        out.held[k] = (h[0], h[1])
                self._db.executemany("INSERT OR REPLACE INTO claims VALUES (?,?,?,?)", take)
                out.claimed.extend(t[0] for t in take)
        return out

    def _stale(self, pid: int, host: str, created: float, now: float) -> bool:
        if now - created > self.claim_timeout_s:
            return True
        return host == self.host and not _pid_alive(int(pid))

    def release(self, keys: Iterable[str]) -> None:
        """Drop this process's claims on `keys` (their requests failed; another run may try them)."""
        keys = list(keys)
        if keys:
            with self._transaction():
                self._release(keys)

    def release_all(self) -> None:
        """Drop every claim of this process (end of a run)."""
        with self._transaction():
            self._db.execute("DELETE FROM claims WHERE pid = ? AND host = ?", (self.pid, self.host))

    def _release(self, keys: list[str]) -> None:
        self._db.executemany("DELETE FROM claims WHERE request_key = ? AND pid = ? AND host = ?",
                             [(k, self.pid, self.host) for k in keys])

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

    def put_many(self, responses: Sequence[CachedResponse], release: Sequence[str] = ()) -> int:
        """Store finished answers in one transaction (all or none); keys already present are kept (first answer
        wins). This process's claims on `release` (failed requests) are dropped in the same transaction."""
        if not responses and not release:
            return 0
        now = time.time()
        rows = [(r.request_key, r.judge, r.text, r.prompt_tokens, r.cached_prompt_tokens, r.completion_tokens,
                 r.latency_s, r.cost_usd, now) for r in responses]
        with self._transaction():
            cur = self._db.executemany(
                f"INSERT OR IGNORE INTO judgments ({', '.join(_COLUMNS)}, created) VALUES ({','.join('?' * 9)})", rows
            )
            # A claim on an answered key is harmless (claim() looks in `judgments` first), so the stored keys' claims
            # are left for `release_all` at the end of the run: one write per answer instead of two.
            self._release(list(release))
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
                if exc_type is None:
                    db.execute("COMMIT")
                elif db.in_transaction:  # SQLite rolls back by itself on some errors (SQLITE_FULL): keep that error
                    db.execute("ROLLBACK")
                return False

        return _Tx()
