"""Parquet segment store: every appended batch becomes one new small Parquet file, written atomically.

Why segments: a pipeline stage finishes work in batches; rewriting one growing results file per batch is
O(n^2) I/O and a kill -9 mid-write corrupts everything done so far. Here an append writes `<seq>-<uuid>.parquet.tmp`,
fsyncs it, renames it into place (atomic on POSIX) and fsyncs the directory, so a segment is either wholly there or
not there at all; a crash leaves at most a stray `.tmp`, which readers ignore and `compact()` removes. A write that
fails (disk full, read-only folder) removes its temp file and raises `StoreWriteError`: one line naming the path
and what was being written.
Reading concatenates the segments; `existing_keys` lets a rerun skip finished work; `compact()` optionally merges
many small segments into one (written the same atomic way before the old ones are unlinked — a row may briefly exist
twice after a crash in between, so readers de-duplicate on the key column when they pass one).

`put(table, name)` writes a *named* segment instead (e.g. one per sweep cell): writing the same name again replaces
it atomically, so redoing a unit of work after a kill never leaves two copies of it.
"""

from __future__ import annotations

import errno
import os
import re
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.errors import AbortedError

_SUFFIX = ".parquet"
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# errno values that mean "the storage refused the write" (not a bug): reported as one line, the run stops.
_STORAGE_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                   errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
                   errno.EPERM: "operation not permitted", errno.EIO: "I/O error", errno.EFBIG: "file too large"}


def storage_error(exc: OSError, path: str | Path, what: str) -> "StoreWriteError":
    """A one-line error for a failed write of `what` to `path` (disk full, read-only, permissions, I/O)."""
    code = exc.errno
    if code is None:  # Arrow's IOError carries the errno only in its text
        code = next((c for c in _STORAGE_ERRNOS if os.strerror(c) in str(exc)), None)
    reason = _STORAGE_ERRNOS.get(code or -1, exc.strerror or str(exc).splitlines()[0])
    return StoreWriteError(f"cannot write {what} to {path}: {reason} (errno {code}); finished work is kept, "
                           "free space or fix the folder's permissions and rerun to resume")


class StoreWriteError(AbortedError):
    """Writing a store failed (disk full, read-only, permissions): nothing was half-written; the run stops."""


def write_parquet_atomic(table: pa.Table, path: str | Path, *, what: str = "a Parquet file") -> Path:
    """Write `table` to `path` via temp file + fsync + rename: the file is complete or absent, never half-written.
    Storage failures remove the temp file and raise StoreWriteError naming `path` and `what`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            pq.write_table(table, f, compression="zstd")
            f.flush()
            os.fsync(f.fileno())
        _fault_point(path)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise storage_error(exc, path, what) from exc
    except BaseException:
        _unlink_quietly(tmp)  # e.g. an Arrow error or Ctrl-C mid-write: no stray temp file
        raise
    return path


def _fault_point(path: Path) -> None:
    from engine.sweep.faultpoints import hit

    hit(f"write:{path.name}")


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


class SegmentStore:
    """A directory of Parquet segments sharing one schema (optional; inferred from the first append otherwise)."""

    def __init__(self, root: str | Path, schema: pa.Schema | None = None):
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise storage_error(exc, self.root, "a store folder") from exc
        self.schema = schema

    def segments(self) -> list[Path]:
        # Sequence prefix (ns timestamp) keeps append order; stray temp files start with "." and are skipped.
        return sorted(p for p in self.root.glob(f"*{_SUFFIX}") if not p.name.startswith("."))

    def append(self, table: pa.Table) -> Path | None:
        """Persist one batch as a new segment; empty batches write nothing."""
        if table.num_rows == 0:
            return None
        if self.schema is not None:
            from engine.schemas import conform

            table = conform(table, self.schema)
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}{_SUFFIX}"
        return write_parquet_atomic(table, self.root / name, what=f"{table.num_rows} rows of {self.root.name}/")

    def put(self, table: pa.Table, name: str) -> Path:
        """Write (or atomically replace) the segment called `name`: idempotent, so a unit of work redone after a
        kill replaces its earlier copy instead of adding a second one. Empty tables are written too (a named
        segment records that the unit exists)."""
        if not _NAME.match(name):
            raise ValueError(f"segment name {name!r}: use letters, digits, '-' and '_' only")
        if self.schema is not None:
            from engine.schemas import conform

            table = conform(table, self.schema)
        return write_parquet_atomic(table, self.path_of(name), what=f"{table.num_rows} rows of {self.root.name}/")

    def path_of(self, name: str) -> Path:
        return self.root / f"{name}{_SUFFIX}"

    def remove(self, name: str) -> bool:
        """Delete the named segment (rolling back an uncommitted unit); True when it existed."""
        path = self.path_of(name)
        if not path.exists():
            return False
        path.unlink()
        _fsync_dir(self.root)
        return True

    def read(self, columns: list[str] | None = None, *, unique_on: str | None = None) -> pa.Table:
        """All rows of all segments (in append order); `unique_on` keeps the first row per key."""
        parts = [pq.read_table(p, columns=columns) for p in self.segments()]
        if not parts:
            if self.schema is None:
                return pa.table({})
            schema = self.schema if columns is None else pa.schema([self.schema.field(c) for c in columns])
            return schema.empty_table()
        table = pa.concat_tables(parts, promote_options="permissive")
        if unique_on is not None and table.num_rows:
            table = _first_per_key(table, unique_on)
        return table

    def existing_keys(self, key_column: str) -> set[str]:
        """Keys already stored: what a rerun skips."""
        keys: set[str] = set()
        for p in self.segments():
            keys.update(pq.read_table(p, columns=[key_column]).column(key_column).to_pylist())
        return keys

    def __len__(self) -> int:
        return sum(pq.ParquetFile(p).metadata.num_rows for p in self.segments())

    def compact(self, *, unique_on: str | None = None) -> Path | None:
        """Merge all segments into one (atomically), then unlink the merged ones and stray temp files."""
        old = self.segments()
        for stray in self.root.glob(".*.tmp"):
            stray.unlink(missing_ok=True)
        if len(old) <= 1:
            return old[0] if old else None
        merged = self.read(unique_on=unique_on)
        # Name sorts before anything appended later, after nothing older that survives (all old ones go).
        target = self.root / f"{time.time_ns():020d}-compact{_SUFFIX}"
        write_parquet_atomic(merged, target, what=f"the compacted {self.root.name}/")
        for p in old:
            p.unlink(missing_ok=True)
        _fsync_dir(self.root)
        return target


def _first_per_key(table: pa.Table, key: str) -> pa.Table:
    idx = pa.array(range(table.num_rows), pa.int64())
    t = table.append_column("__row", idx)
    firsts = t.group_by(key, use_threads=False).aggregate([("__row", "min")]).column("__row_min")
    keep = pc.sort_indices(firsts)
    return table.take(pc.take(firsts, keep))
