"""Parquet segment store: appended rows become Parquet segments, written atomically, group-committed and compacted.

Why segments: a pipeline stage finishes work in pieces; rewriting one growing results file per piece is O(n^2) I/O
and a kill -9 mid-write corrupts everything done so far. A segment is written as `.<name>.<hex>.tmp`, fsynced,
renamed into place (atomic on POSIX) and the directory fsynced, so it is either wholly there or not at all; a crash
leaves at most a stray `.tmp`, which readers ignore and writers remove. A write that fails (disk full, read-only
folder) removes its temp file and raises `StoreWriteError`: one line naming the path and what was being written.

Group commit (`GroupCommit`, off unless a store is given one; the sweep's stores use it): a store that receives many
small appends (the streaming caption stage appends every caption, the decode stage every video's frames rows) would
leave one small file per append, and shared file systems (NFS, Lustre) choke on hundreds of thousands of them. With
group commit, appended rows are buffered and written as ONE segment when `rows` rows are buffered or `interval_s`
has passed since the oldest buffered row (a timer thread), and on `flush()`/`close()` (and at interpreter exit).
Every read (`read`, `existing_keys`, `segments`, `len`) flushes first, so no caller misses a row. A kill -9 loses at
most the rows buffered since the last commit: at most `interval_s` worth, which the next run redoes (they are not
in the store, so they are not "finished"). `put` is never buffered, and first flushes the stores named in
`flush_before_put` (a committed cell never refers to captions a kill could still lose).

Compaction: after a commit, when `compact_after` or more small segments trail the store, they are merged into one
(size-tiered: an older segment joins the merge only while it is at most 4x the size of what is merged so far, and
segments of `compact_bytes` or more are left alone, so each row is rewritten a bounded number of times); `close()`
merges the trailing small segments whatever their number. A merged segment `<first part's stamp>-<hex>-merged` sorts
where its first part did and lists the parts it replaces in its Parquet footer (`capeval.merged_from`); it is renamed
into place before the parts are unlinked. Readers skip every part a present merged segment lists, so a kill -9 at any
point of a compaction leaves each row readable exactly once (the next compaction unlinks the leftover parts).
Only auto-named segments (appends and merges) are ever merged; named ones (`put`) are left as they are.

`put(table, name)` writes a *named* segment instead (e.g. one per sweep cell): writing the same name again replaces
it atomically, so redoing a unit of work after a kill never leaves two copies of it.

`CAPEVAL_STORE_COMMIT="rows=512,interval_s=2,compact_after=8"` overrides the sweep's group-commit settings (an
operator's knob; the fault suite uses it to make commits and compactions happen at small sizes).
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import re
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import BinaryIO, Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from capeval.engine.errors import AbortedError
from capeval.engine.faultpoints import hit
from capeval.engine.schemas import conform
from capeval.engine.store.group_commit import GroupCommit

_SUFFIX = ".parquet"
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_AUTO = re.compile(r"^\d{20}-[0-9a-f]{8}(-merged)?$")  # stems of appended and merged segments
_MERGED_FROM = b"capeval.merged_from"
_TIER_RATIO = 4  # an older segment joins a merge while it is at most this many times what is merged so far


def fsync_dir(path: Path) -> None:
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


def write_parquet_atomic(table: pa.Table, path: str | Path, *, what: str = "a Parquet file", **options) -> Path:
    """Write `table` to `path` via temp file + fsync + rename: the file is complete or absent, never half-written.
    Storage failures remove the temp file and raise StoreWriteError naming `path` and `what`. `options`: for
    pyarrow's write_table (default: zstd compression)."""
    return _write_atomic(path, what, lambda f: pq.write_table(table, f, **({"compression": "zstd"} | options)))


def write_text_atomic(text: str, path: str | Path, *, what: str) -> Path:
    """Write `text` (UTF-8) to `path` as write_parquet_atomic writes a table: whole or absent; a storage failure
    (disk full, read-only) removes the temp file and raises StoreWriteError naming `path` and `what`."""
    return _write_atomic(path, what, lambda f: f.write(text.encode("utf-8")))


def _write_atomic(path: str | Path, what: str, write: Callable[[BinaryIO], object]) -> Path:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        _fault_point(path)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise storage_error(exc, path, what) from exc
    except BaseException:
        _unlink_quietly(tmp)  # e.g. an Arrow error or Ctrl-C mid-write: no stray temp file
        raise
    return path


def storage_errno(exc: BaseException) -> int | None:
    """The errno of an OSError that says the storage refused a write (disk full, quota, read-only, ...), else None;
    Arrow's errors carry it only in their text."""
    if not isinstance(exc, OSError):
        return None
    code = exc.errno
    if code is None:
        code = next((c for c in _STORAGE_ERRNOS if os.strerror(c) in str(exc)), None)
    return code if code in _STORAGE_ERRNOS else None


def _fault_point(path: Path) -> None:
    hit(f"write:{path.name}")


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


_LIVE: "weakref.WeakSet[SegmentStore]" = weakref.WeakSet()


@atexit.register
def _flush_live_stores() -> None:
    """A process that ends normally (an error included) commits what it buffered; only a kill loses it."""
    for store in list(_LIVE):
        try:
            store.flush()
        except Exception:  # noqa: BLE001 - nothing to report to at exit; the rows are redone by the next run
            pass


class SegmentStore:
    """A directory of Parquet segments sharing one schema (optional; inferred from the first append otherwise).
    With `group` (GroupCommit) appends are buffered and committed in groups, and small segments are compacted."""

    def __init__(self, root: str | Path, schema: pa.Schema | None = None, *, group: GroupCommit | None = None,
                 flush_before_put: tuple["SegmentStore", ...] = ()):
        self.root = Path(root)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise storage_error(exc, self.root, "a store folder") from exc
        self.schema = schema
        self.group = group
        self.flush_before_put = tuple(flush_before_put)
        self._lock = threading.RLock()  # appends (caption thread), timer commits and reads (judging thread)
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._timer: threading.Timer | None = None
        self._error: BaseException | None = None  # a timed commit that failed: raised by the next call
        self._merged_from: dict[str, frozenset[str]] = {}  # merged segment name -> parts (files never change)

    # -- writing ------------------------------------------------------------------------------------------------------
    def append(self, table: pa.Table) -> Path | None:
        """Persist rows: at once as a new segment, or (group commit) buffered until the group is committed.
        Empty tables write nothing. Returns the segment written now, if any."""
        if table.num_rows == 0:
            return None
        if self.schema is not None:
            table = conform(table, self.schema)
        if self.group is None:
            return self._write_segment(table)
        with self._lock:
            self._raise_pending()
            self._buffer.append(table)
            self._buffered += table.num_rows
            _LIVE.add(self)
            if self._buffered >= self.group.rows:
                return self._commit()
            if self._timer is None:
                timer = threading.Timer(self.group.interval_s, self._timed_commit)
                timer.args, timer.daemon = (timer,), True  # it knows itself: a cancelled one that fires does nothing
                self._timer = timer
                timer.start()
        return None

    def flush(self) -> Path | None:
        """Commit the buffered rows now (a no-op without any); raises what a timed commit ran into."""
        with self._lock:
            self._raise_pending()
            return self._commit() if self._buffer else None

    def close(self) -> None:
        """Flush, then merge the trailing small segments into one: the store at rest is a few files."""
        with self._lock:
            self.flush()
            if self.group is not None:
                self._compact_tail(2, tiered=False)
            _LIVE.discard(self)

    def put(self, table: pa.Table, name: str) -> Path:
        """Write (or atomically replace) the segment called `name`: idempotent, so a unit of work redone after a
        kill replaces its earlier copy instead of adding a second one. Empty tables are written too (a named
        segment records that the unit exists). Never buffered; the `flush_before_put` stores are flushed first."""
        if not _NAME.match(name) or _AUTO.match(name):
            raise ValueError(f"segment name {name!r}: use letters, digits, '-' and '_' only (not a segment stamp)")
        for store in self.flush_before_put:
            store.flush()
        if self.schema is not None:
            table = conform(table, self.schema)
        with self._lock:
            return write_parquet_atomic(table, self.path_of(name), what=f"{table.num_rows} rows of {self.root.name}/")

    def path_of(self, name: str) -> Path:
        return self.root / f"{name}{_SUFFIX}"

    def remove(self, name: str) -> bool:
        """Delete the named segment (rolling back an uncommitted unit); True when it existed."""
        path = self.path_of(name)
        if not path.exists():
            return False
        path.unlink()
        fsync_dir(self.root)
        return True

    # -- reading (every read sees what was appended: the buffer is committed first) -------------------------------
    def segments(self) -> list[Path]:
        """The segment files holding the store's rows, in append order (buffered rows committed first)."""
        with self._lock:
            self.flush()
            return self._listed()

    def read(self, columns: list[str] | None = None, *, unique_on: str | None = None) -> pa.Table:
        """All rows of all segments (in append order); `unique_on` keeps the first row per key."""
        with self._lock:
            parts = [_read(p, columns) for p in self.segments()]
        if not parts:
            if self.schema is None:
                return pa.table({})
            schema = self.schema if columns is None else pa.schema([self.schema.field(c) for c in columns])
            return schema.empty_table()
        table = pa.concat_tables(parts, promote_options="permissive")
        if unique_on is not None and table.num_rows:
            table = first_per_key(table, unique_on)
        return table

    def existing_keys(self, key_column: str) -> set[str]:
        """Keys already stored: what a rerun skips."""
        keys: set[str] = set()
        with self._lock:
            for p in self.segments():
                keys.update(pq.read_table(p, columns=[key_column]).column(key_column).to_pylist())
        return keys

    def __len__(self) -> int:
        with self._lock:
            return sum(pq.ParquetFile(p).metadata.num_rows for p in self.segments())

    # -- compaction -------------------------------------------------------------------------------------------------
    def compact(self, *, unique_on: str | None = None) -> Path | None:
        """Merge every appended segment into one (atomically; `unique_on` keeps the first row per key), then unlink
        the merged ones and stray temp files. Named segments stay as they are."""
        with self._lock:
            self.flush()
            for stray in self.root.glob(".*.tmp"):
                stray.unlink(missing_ok=True)
            self._unlink_merged_parts()
            auto = [p for p in self._listed() if _AUTO.match(p.stem)]
            if len(auto) <= 1 and unique_on is None:
                return auto[0] if auto else None
            return self._merge(auto, unique_on=unique_on) if auto else None

    def _compact_tail(self, at_least: int, *, tiered: bool) -> Path | None:
        self._unlink_merged_parts()
        run, total = [], 0
        for p in reversed([p for p in self._listed() if _AUTO.match(p.stem)]):
            size = p.stat().st_size
            if size >= self.group.compact_bytes or (tiered and run and size > _TIER_RATIO * total):
                break
            run.append(p)
            total += size
        return self._merge(run[::-1]) if len(run) >= at_least else None

    def _merge(self, parts: list[Path], *, unique_on: str | None = None) -> Path:
        """One merged segment in place of `parts`: renamed into place before any part is unlinked."""
        tables = [_read(p, None) for p in parts]
        merged = pa.concat_tables(tables, promote_options="permissive")
        if unique_on is not None and merged.num_rows:
            merged = first_per_key(merged, unique_on)
        merged = merged.replace_schema_metadata({_MERGED_FROM: json.dumps([p.name for p in parts])})
        target = self.root / f"{parts[0].name[:20]}-{uuid.uuid4().hex[:8]}-merged{_SUFFIX}"
        write_parquet_atomic(merged, target, what=f"{merged.num_rows} merged rows of {self.root.name}/")
        _fault_point_named("compact")  # the merged segment is in place, its parts are not yet removed
        for p in parts:
            p.unlink(missing_ok=True)
        fsync_dir(self.root)
        return target

    # -- internals --------------------------------------------------------------------------------------------------
    def _write_segment(self, table: pa.Table) -> Path:
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}{_SUFFIX}"
        with self._lock:
            return write_parquet_atomic(table, self.root / name, what=f"{table.num_rows} rows of {self.root.name}/")

    def _commit(self) -> Path:
        """Write the buffer as one segment (kept buffered if the write fails), then compact the tail if due."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        table = pa.concat_tables(self._buffer, promote_options="permissive") if len(self._buffer) > 1 \
            else self._buffer[0]
        path = self._write_segment(table)
        self._buffer, self._buffered = [], 0
        _fault_point_named(f"commit:{self.root.name}")  # a group is committed, nothing is buffered
        self._compact_tail(self.group.compact_after, tiered=True)
        return path

    def _timed_commit(self, timer) -> None:
        with self._lock:
            if timer is not self._timer:  # cancelled: the rows it waited for were committed meanwhile
                return
            self._timer = None
            if not self._buffer or self._error is not None:
                return
            try:
                self._commit()
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread by its next call
                self._error = exc

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _listed(self) -> list[Path]:
        # Stamp prefixes (ns) keep append order; temp files start with "." and are skipped; so are the parts of a
        # merged segment still present after a kill between its rename and their unlinking.
        paths = sorted(p for p in self.root.glob(f"*{_SUFFIX}") if not p.name.startswith("."))
        covered: set[str] = set()
        for p in paths:
            if p.stem.endswith("-merged") and _AUTO.match(p.stem):
                covered |= self._parts_of(p)
        return [p for p in paths if p.name not in covered]

    def _parts_of(self, merged: Path) -> frozenset[str]:
        parts = self._merged_from.get(merged.name)
        if parts is None:
            meta = pq.read_schema(merged).metadata or {}
            parts = frozenset(json.loads(meta.get(_MERGED_FROM, b"[]")))
            self._merged_from[merged.name] = parts
        return parts

    def _unlink_merged_parts(self) -> None:
        """Remove parts a merged segment already holds (left behind by a kill during a compaction)."""
        listed = {p.name for p in self._listed()}
        stale = [p for p in self.root.glob(f"*{_SUFFIX}") if not p.name.startswith(".") and p.name not in listed]
        for p in stale:
            p.unlink(missing_ok=True)
        if stale:
            fsync_dir(self.root)


def _read(path: Path, columns: list[str] | None) -> pa.Table:
    return pq.read_table(path, columns=columns).replace_schema_metadata(None)


def _fault_point_named(point: str) -> None:
    hit(point)


def first_per_key(table: pa.Table, key: str) -> pa.Table:
    idx = pa.array(range(table.num_rows), pa.int64())
    t = table.append_column("__row", idx)
    firsts = t.group_by(key, use_threads=False).aggregate([("__row", "min")]).column("__row_min")
    keep = pc.sort_indices(firsts)
    return table.take(pc.take(firsts, keep))
