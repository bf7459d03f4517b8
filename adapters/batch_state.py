"""What a batch judge has sent and received, on disk, so that a killed or restarted process never pays twice.

One SQLite file (WAL) per state folder; the judge loop puts the folder beside the judgment cache
(`<cache>/batches/`, in a sweep `<run>/judge_cache/batches/`). Tables:

- `files`: input files uploaded, by the SHA-256 of their bytes: the same file is never uploaded twice;
- `batches`: one row per batch, written *before* it is created (`uploading`, then `creating` once the file is up),
  then carrying the provider's batch id and status; `collected` once its output is downloaded;
- `batch_keys`: which request keys (and which request bodies) each batch holds;
- `answers`: every answer downloaded that reads as a chat completion with text, by key and body digest, until the
  judgment cache has it. An answer rejected later (over the judge loop's reply-size cap: `forget_answers`) leaves
  the table, so a rerun sends its request again instead of serving the rejected answer forever.

A request whose key and body a batch not yet collected holds is never sent again: the process waits for that batch
(this one's or a dead one's). A row still `uploading` / `creating` after a kill is settled by asking the provider
(adapters/openai_batch.py lists its batches by input file), so a kill -9 between creating a batch and recording its
id loses nothing either.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Sequence

from capeval.engine import exitcodes
from capeval.engine.errors import AbortedError

#: statuses after which a batch answers nothing more (OpenAI's; vLLM's runner ends `completed` or `failed`)
TERMINAL = ("completed", "expired", "failed", "cancelled")
#: every status the Batch API documents; any other is polled a bounded number of times (BatchOptions.max_unknown_polls)
KNOWN_STATUSES = TERMINAL + ("validating", "in_progress", "finalizing", "cancelling")
UNCONFIRMED = ("uploading", "creating")
_CHUNK = 500  # keys per IN (...) query (SQLite's default limit on variables is 999 on old builds)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (sha TEXT PRIMARY KEY, provider TEXT, file_id TEXT, n INTEGER, bytes INTEGER,
                                  at REAL);
CREATE TABLE IF NOT EXISTS batches (id INTEGER PRIMARY KEY AUTOINCREMENT, provider TEXT NOT NULL, sha TEXT,
                                    file_id TEXT, batch_id TEXT, status TEXT NOT NULL, n INTEGER, created REAL,
                                    updated REAL, output_file_id TEXT, error_file_id TEXT, note TEXT, owner TEXT);
CREATE TABLE IF NOT EXISTS batch_keys (batch INTEGER NOT NULL, key TEXT NOT NULL, body_sha TEXT NOT NULL,
                                       PRIMARY KEY (batch, key));
CREATE INDEX IF NOT EXISTS batch_keys_key ON batch_keys (key);
CREATE TABLE IF NOT EXISTS answers (key TEXT NOT NULL, body_sha TEXT NOT NULL, batch INTEGER, body BLOB NOT NULL,
                                    at REAL, PRIMARY KEY (key, body_sha));
"""


class BatchesPending(AbortedError):
    """`capeval sweep --no-wait` (or a batch judge with `wait = false`): batches are submitted and not finished yet.
    Everything answered so far is kept; running the same command again collects them (exit code PENDING)."""

    exit_code = exitcodes.PENDING


_NO_WAIT = False


def set_no_wait(on: bool = True) -> None:
    """Process-wide: batch judges submit their rounds and stop with BatchesPending instead of waiting."""
    global _NO_WAIT
    _NO_WAIT = bool(on)


def no_wait() -> bool:
    return _NO_WAIT or os.environ.get("CAPEVAL_BATCH_NO_WAIT", "") not in ("", "0")


def owner() -> str:
    """This process, as recorded on the batches it makes (host:pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def abandoned(row: dict, stale_s: float = 3600.0) -> bool:
    """Whether the process that recorded `row` is gone: dead on this host, or silent for `stale_s` elsewhere. A
    live process's half-made batch is its own business (two runs may share a state folder)."""
    host, _, pid = (row.get("owner") or ":").rpartition(":")
    if host == socket.gethostname() and pid.isdigit():
        if int(pid) == os.getpid():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    return time.time() - float(row.get("updated") or 0) > stale_s


class BatchState:
    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / "batches.sqlite"
        self._con = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=FULL")  # a recorded batch id must survive a power cut too
        with self._tx() as con:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    con.execute(statement)

    @contextmanager
    def _tx(self):
        self._con.execute("BEGIN IMMEDIATE")
        try:
            yield self._con
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")

    def close(self) -> None:
        self._con.close()

    # -- files --------------------------------------------------------------------------------------------------------
    def file_id(self, provider: str, sha: str) -> str | None:
        row = self._con.execute("SELECT file_id FROM files WHERE sha = ? AND provider = ?", (sha, provider)).fetchone()
        return row[0] if row else None

    def remember_file(self, provider: str, sha: str, file_id: str, n: int, size: int) -> None:
        with self._tx() as con:
            con.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?)",
                        (sha, provider, file_id, n, size, time.time()))

    def forget_file(self, provider: str, sha: str) -> None:
        with self._tx() as con:
            con.execute("DELETE FROM files WHERE sha = ? AND provider = ?", (sha, provider))

    # -- batches ------------------------------------------------------------------------------------------------------
    def begin(self, provider: str, sha: str, keys: Sequence[tuple[str, str]]) -> int:
        """Record a batch about to be made (status `uploading`) with its (key, body digest) pairs; its local id."""
        now = time.time()
        with self._tx() as con:
            cur = con.execute("INSERT INTO batches (provider, sha, status, n, created, updated, owner) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?)", (provider, sha, "uploading", len(keys), now, now, owner()))
            local = int(cur.lastrowid)
            con.executemany("INSERT OR REPLACE INTO batch_keys VALUES (?, ?, ?)", [(local, k, s) for k, s in keys])
        return local

    def update(self, local: int, **fields) -> None:
        allowed = {"file_id", "batch_id", "status", "output_file_id", "error_file_id", "note", "owner"}
        bad = set(fields) - allowed
        if bad:
            raise ValueError(f"unknown batch fields {sorted(bad)}")
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._tx() as con:
            con.execute(f"UPDATE batches SET {cols}, updated = ? WHERE id = ?", (*fields.values(), time.time(), local))

    def drop(self, local: int) -> None:
        """Forget a batch that never reached the provider: its requests are free to go in another batch."""
        with self._tx() as con:
            con.execute("DELETE FROM batch_keys WHERE batch = ?", (local,))
            con.execute("DELETE FROM batches WHERE id = ?", (local,))

    def batch(self, local: int) -> dict | None:
        cur = self._con.execute("SELECT * FROM batches WHERE id = ?", (local,))
        row = cur.fetchone()
        return dict(zip([d[0] for d in cur.description], row)) if row else None

    def batches(self, provider: str, statuses: Iterable[str] | None = None) -> list[dict]:
        sql, args = "SELECT * FROM batches WHERE provider = ?", [provider]
        if statuses is not None:
            statuses = list(statuses)
            sql += f" AND status IN ({','.join('?' * len(statuses))})"
            args += statuses
        cur = self._con.execute(sql + " ORDER BY id", args)
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def keys_of(self, local: int) -> dict[str, str]:
        return dict(self._con.execute("SELECT key, body_sha FROM batch_keys WHERE batch = ?", (local,)).fetchall())

    def open_batch_of(self, provider: str, pairs: Sequence[tuple[str, str]]) -> dict[str, int]:
        """key -> the newest batch not yet collected (nor settled as lost) that holds this key with this body."""
        want = dict(pairs)
        out: dict[str, int] = {}
        for i in range(0, len(pairs), _CHUNK):
            keys = [k for k, _ in pairs[i:i + _CHUNK]]
            rows = self._con.execute(
                "SELECT k.key, k.body_sha, b.id FROM batch_keys k JOIN batches b ON b.id = k.batch "
                f"WHERE k.key IN ({','.join('?' * len(keys))}) AND b.provider = ? AND b.status != 'collected' "
                "ORDER BY b.id", (*keys, provider)).fetchall()
            for key, sha, local in rows:
                if want.get(key) == sha:
                    out[key] = local
        return out

    # -- answers ------------------------------------------------------------------------------------------------------
    def answers(self, pairs: Sequence[tuple[str, str]]) -> dict[str, bytes]:
        """key -> the downloaded answer to exactly this body (same key, same body digest)."""
        out: dict[str, bytes] = {}
        for i in range(0, len(pairs), _CHUNK):
            part = pairs[i:i + _CHUNK]
            where = " OR ".join(["(key = ? AND body_sha = ?)"] * len(part))
            args = [x for pair in part for x in pair]
            for key, body in self._con.execute(f"SELECT key, body FROM answers WHERE {where}", args):
                out[key] = bytes(body)
        return out

    def forget_answers(self, keys: Sequence[str]) -> int:
        """Drop the downloaded answers of these keys (rejected: unreadable, or refused by the judge loop), so the
        next run sends their requests again instead of serving the same answer forever; how many were dropped."""
        dropped = 0
        keys = list(keys)
        with self._tx() as con:
            for i in range(0, len(keys), _CHUNK):
                part = keys[i:i + _CHUNK]
                cur = con.execute(f"DELETE FROM answers WHERE key IN ({','.join('?' * len(part))})", part)
                dropped += cur.rowcount
        return dropped

    def collect(self, local: int, answers: dict[str, tuple[str, bytes]], status: str, note: str | None = None) -> None:
        """Store a finished batch's answers (key -> (body digest, completion)) and mark it collected, at once."""
        now = time.time()
        with self._tx() as con:
            con.executemany("INSERT OR REPLACE INTO answers VALUES (?, ?, ?, ?, ?)",
                            [(k, sha, local, body, now) for k, (sha, body) in answers.items()])
            con.execute("UPDATE batches SET status = 'collected', note = ?, updated = ? WHERE id = ?",
                        (f"{status}" + (f": {note}" if note else ""), now, local))
