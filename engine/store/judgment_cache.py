"""Content-addressed judgment cache: request_key -> the judge's raw response.

request_key = content_key(judge name, judge revision, system, user, images digest, sampling params, seed) is
computed when requests are built (capeval.engine.protocols.base.request_key), so the same rendered prompt to the same judge
weights with the same sampling is answered once, by any run, in any order.

Why SQLite in WAL mode (not Parquet segments): the cache is a point-lookup map that grows one batch at a time and is
read before every batch. SQLite gives an indexed primary key (lookups of a few thousand keys out of millions without
reading everything), atomic multi-row commits (a batch is in or not), `INSERT OR IGNORE` (no duplicates even if two
workers answer the same key) and, in WAL mode, readers that never block the single writer. A commit in WAL mode with
synchronous=NORMAL survives a kill -9 of the process (only an OS crash/power loss can lose the last commits); so a
killed run keeps every batch it committed and a rerun asks only for the rest. Only successful responses are stored:
backend errors are retried by the next run instead of being cached.
Stage *outputs* (verdict tables) go to the Parquet segment store instead (capeval.engine.store.segments).

One writer per key (issue 8): processes that share a cache never pay twice for one key. Before sending, a process
`claim`s its keys in the `claims` table (pid, host, heartbeat time) in the same transaction that re-checks
`judgments`; a key another live process has claimed is waited for (the judge loop polls `claim` again) instead of
sent. Claims belong to a process (pid, host), not to one JudgmentCache instance. While an instance holds claims, a
daemon heartbeat thread (its own connection) sets the time of every claim of this process to now every
`claim_timeout_s / 3` seconds, so a request may take as long as it takes (long generations, a queued API, a paused
judge pool) without losing its claim. A claim is taken over when its pid is dead (same host: pids are only checkable
there) or when its time is older than `claim_timeout_s`, i.e. its process stopped heart-beating: killed on another
host, a partitioned host, or a cache closed without `release_all`. So a killed run never blocks the next one for more
than `claim_timeout_s`. (A process whose main thread hangs while the heartbeat thread runs keeps its claims; so do
hosts whose clocks are more than `claim_timeout_s` apart, which see each other's claims as fresh or stale wrongly.)
Claims are released in the transaction that stores the answers (`put_many(..., release=...)`), with `release` after
a failure, or all at once with `release_all` at the end of a run; `release_all` and `close` stop the heartbeat.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from capeval.engine.schemas import utf8_text

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
    created REAL NOT NULL,
    reasoning_tokens INTEGER
) WITHOUT ROWID
"""
# `reasoning_tokens` (the server's count of a thinking model's reasoning tokens, NULL when it reported none;
# engine/reasoning.py) came later: caches made before it get the column added when opened.
_ADD_REASONING = "ALTER TABLE judgments ADD COLUMN reasoning_tokens INTEGER"
# `created` is the claim's last heartbeat (claimed or refreshed), not its creation time: the column keeps its old name
# so that caches written before the heartbeat still open and mix with new ones.
_CLAIMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    request_key TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID
"""
_COLUMNS = ("request_key", "judge", "text", "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
            "latency_s", "cost_usd", "reasoning_tokens")
_LOOKUP_CHUNK = 500  # stay below SQLite's bound-parameter limit
_HEARTBEAT_MIN_S = 0.05  # tests set tiny claim timeouts: never spin faster than this
_HEARTBEAT_RETRY_S = 1.0  # after a failed beat (db locked), try again this soon rather than a whole interval later


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


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
    reasoning_tokens: int | None = None  # reported by the server (usage.completion_tokens_details)


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


class _ClaimHeartbeat:
    """Daemon thread: refreshes the time of every claim of (pid, host) every `interval_s` seconds through its own
    connection, until `stop()`. It never raises: a failed beat (db locked, file gone) is retried soon. It holds no
    reference to the JudgmentCache, so a cache dropped without `close()` stops it too (weakref.finalize)."""

    def __init__(self, path: Path, pid: int, host: str, interval_s: float):
        self.path, self.pid, self.host, self.interval_s = path, pid, host, interval_s
        self.beats = 0  # successful refreshes (diagnostics)
        self.failures = 0  # failed tries, each retried
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="capeval-claim-heartbeat", daemon=True)
        self.thread.start()

    def stop(self, join: bool = True) -> None:
        self._stop.set()
        if join and self.thread is not threading.current_thread():
            self.thread.join()

    def _run(self) -> None:
        db = None
        wait = self.interval_s
        try:
            while not self._stop.wait(wait):
                try:
                    if db is None:
                        # A short busy wait: a beat that cannot get the write lock soon is retried, and stop() never
                        # waits for the 60 s the main connection allows.
                        db = sqlite3.connect(self.path, timeout=min(self.interval_s, 5.0), isolation_level=None)
                        db.execute("PRAGMA synchronous=NORMAL")  # per connection; FULL would fsync every beat
                    db.execute("UPDATE claims SET created = ? WHERE pid = ? AND host = ?",
                               (time.time(), self.pid, self.host))
                    self.beats += 1
                    wait = self.interval_s
                except Exception:  # noqa: BLE001 - never into the caller; the next beat tries again
                    self.failures += 1
                    wait = min(self.interval_s, _HEARTBEAT_RETRY_S)
        finally:
            if db is not None:
                try:
                    db.close()
                except Exception:  # noqa: BLE001
                    pass


class JudgmentCache:
    """SQLite (WAL) file `<cache_dir>/judgments.sqlite`. One instance per thread; safe across processes."""

    FILENAME = "judgments.sqlite"
    # A claim not refreshed for this long is taken over even if its process seems alive (it may be on another
    # host): a live process refreshes its claims every claim_timeout_s / 3 (_ClaimHeartbeat), so this bounds how
    # long a dead or partitioned process blocks its keys, not how long a request may take.
    CLAIM_TIMEOUT_S = 900.0

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
        if "reasoning_tokens" not in {r[1] for r in self._db.execute("PRAGMA table_info(judgments)")}:
            try:
                self._db.execute(_ADD_REASONING)
            except sqlite3.OperationalError as exc:  # another process added it at the same moment
                if "duplicate column" not in str(exc):
                    raise
        self._db.execute(_CLAIMS_SCHEMA)
        self._heartbeat: _ClaimHeartbeat | None = None  # started by the first successful claim
        self._heartbeat_lock = threading.Lock()
        self._heartbeat_finalizer: weakref.finalize | None = None

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
                for row in self._answers(chunk):
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
        if out.claimed:
            self._start_heartbeat()
        return out

    @property
    def heartbeat_interval_s(self) -> float:
        return max(_HEARTBEAT_MIN_S, self.claim_timeout_s / 3)

    def _start_heartbeat(self) -> None:
        with self._heartbeat_lock:
            if self._heartbeat is None or not self._heartbeat.thread.is_alive():
                self._heartbeat = _ClaimHeartbeat(self.path, self.pid, self.host, self.heartbeat_interval_s)
                self._heartbeat_finalizer = weakref.finalize(self, self._heartbeat.stop, False)

    def _stop_heartbeat(self) -> None:
        with self._heartbeat_lock:
            heartbeat, self._heartbeat = self._heartbeat, None
            if self._heartbeat_finalizer is not None:
                self._heartbeat_finalizer.detach()
                self._heartbeat_finalizer = None
        if heartbeat is not None:
            heartbeat.stop()

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
        """Drop every claim of this process (end of a run) and stop the heartbeat until the next `claim`."""
        with self._transaction():
            self._db.execute("DELETE FROM claims WHERE pid = ? AND host = ?", (self.pid, self.host))
        self._stop_heartbeat()  # only once they are gone: if the delete failed, the claims stay fresh until close()

    def _release(self, keys: list[str]) -> None:
        self._db.executemany("DELETE FROM claims WHERE request_key = ? AND pid = ? AND host = ?",
                             [(k, self.pid, self.host) for k in keys])

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedResponse]:
        keys = list(dict.fromkeys(keys))
        found: dict[str, CachedResponse] = {}
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            for row in self._answers(chunk):
                found[row[0]] = CachedResponse(*row)
        return found

    def _answers(self, keys: list[str]) -> list[tuple]:
        """The stored rows of `keys`. A stored text that is not valid UTF-8 (written by another tool, or damaged) is
        read with U+FFFD in place of the bad bytes: the default decoding would raise, and that one row would stop
        every run that looks it up. (Only such a lookup pays for decoding in Python.)"""
        sql = f"SELECT {', '.join(_COLUMNS)} FROM judgments WHERE request_key IN ({','.join('?' * len(keys))})"
        try:
            return self._db.execute(sql, keys).fetchall()
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc):
                raise
            self._db.text_factory = _lenient_text
            try:
                return self._db.execute(sql, keys).fetchall()
            finally:
                self._db.text_factory = str

    def put_many(self, responses: Sequence[CachedResponse], release: Sequence[str] = ()) -> int:
        """Store finished answers in one transaction (all or none); keys already present are kept (first answer
        wins). This process's claims on `release` (failed requests) are dropped in the same transaction."""
        if not responses and not release:
            return 0
        now = time.time()
        rows = [(r.request_key, r.judge, utf8_text(r.text), r.prompt_tokens, r.cached_prompt_tokens,
                 r.completion_tokens, r.latency_s, r.cost_usd, r.reasoning_tokens, now) for r in responses]
        with self._transaction():
            cur = self._db.executemany(
                f"INSERT OR IGNORE INTO judgments ({', '.join(_COLUMNS)}, created) VALUES ({','.join('?' * 10)})", rows
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
        """Stop the heartbeat and close. Claims not released go stale `claim_timeout_s` later (then another process
        takes them over), or at once for processes on this host once this one has exited."""
        self._stop_heartbeat()
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
