"""Judge transcripts: for every judge request row of a run, what was sent and what came back, per attempt.

One row per request row (every step, intermediate steps included), joined to the verdict rows by `request_key`
and the identity columns they share (TRANSCRIPT_KEY; a request text asked for two identical items is one key, two
rows). A row holds the messages (system, user; images as a reference: the frames path, their digest and count,
never bytes), the sampling (max_tokens, temperature, structured-output choices, the JSON schema's name and digest,
seed), the final parse outcome (after official retry rounds, as in the verdict rows) and `attempts`: the first ask
and each re-ask with its own sampling, where its answer came from, the raw reply, what parsing made of it (or the
backend's error), tokens (prompt, cached, completion, reasoning), latency and cost (null when unknown).

`source` of an attempt:
  sent      this run asked the judge (exactly one per request the server received, errors included)
  cache     answered from the judgment cache (an earlier run, or another process sharing the cache)
  shared    the same request (same key) was asked once in this run for another row; this row reuses its answer
  not sent  the request could not be built (e.g. unreadable frames); `error` says why
Tokens, latency and cost of a `cache` or `shared` attempt are those of the original ask, not spent again.

Storage: a sweep writes `transcripts/<cell_key>.parquet` next to `verdicts/` (committed before them, rolled back
with them: engine/sweep/cells.py), zstd-compressed with dictionary encoding. Rendered prompts are not stored
verbatim once per row on disk: identical texts (system prompts, a schema digest, a caption judged by many
questions) are dictionary entries stored once per row group, and the template text every prompt repeats is what
zstd removes (the rows are in caption order, so a caption's prompts sit side by side). tests/store/
test_transcripts_compact.py measures it.

Rows are captured while judging (engine/judging/transcribe.py) into a sink: `MemoryTranscripts` (a table in
memory; `run_judging(transcripts=...)`) or `TranscriptSpool` (chunks spooled to a temp file beside the final one,
so a million-row cell never holds its prompts in memory; rewritten and renamed into place at `commit`). Captured
chunks carry two hidden columns (`_depth`, `_order`: which row of the cell) until `finish` applies the cell's last
corrections (official retry rounds) and drops them. A cell that cannot be corrected at its end (no official retry
rounds) is written in its committed form as it is judged (`TranscriptSpool(commit_as=CommitForm(...))`): the same
file, without a second pass over its rows when the cell ends.
"""

from __future__ import annotations

import os
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from capeval.engine.store.segments import fsync_dir, storage_error, write_parquet_atomic

#: one ask of a request row (first ask = attempt 0)
ATTEMPT = pa.struct([
    pa.field("attempt", pa.int8()),
    pa.field("key", pa.string()),  # the cache key of a re-ask (null for attempt 0: the row's request_key)
    pa.field("source", pa.string()),  # sent | cache | shared | not sent (see the module docstring)
    pa.field("temperature", pa.float64()),  # null: none sent (the backend's default)
    pa.field("seed", pa.int64()),
    pa.field("reply", pa.string()),  # the raw reply (reasoning included); for a backend failure what the server
    # answered that the backend refused (a cut or malformed reply; several attempts labelled), else null
    pa.field("verdict", pa.int8()),
    pa.field("parse_status", pa.int8()),  # capeval.engine.schemas.ParseStatus of this reply
    pa.field("detail", pa.string()),
    pa.field("error", pa.string()),  # what went wrong: the backend's error or why the reply was rejected
    pa.field("prompt_tokens", pa.int32()),
    pa.field("cached_prompt_tokens", pa.int32()),
    pa.field("completion_tokens", pa.int32()),
    pa.field("reasoning_tokens", pa.int32()),
    pa.field("latency_s", pa.float32()),
    pa.field("cost_usd", pa.float64()),  # null when the backend reported none (no prices set)
])

#: identity columns shared with the verdict rows (capeval.engine.schemas.VERDICTS): the join key
TRANSCRIPT_KEY = ["request_key", "protocol", "task", "item_id", "video_id", "step", "sub_index", "trial"]

TRANSCRIPTS = pa.schema([
    pa.field("request_key", pa.string(), nullable=False),
    pa.field("protocol", pa.string()),
    pa.field("task", pa.string()),
    pa.field("item_id", pa.string()),
    pa.field("video_id", pa.string()),
    pa.field("caption_key", pa.string()),
    pa.field("captioner", pa.string()),
    pa.field("prompt_id", pa.string()),
    pa.field("frame_spec", pa.string()),
    pa.field("step", pa.string()),
    pa.field("sub_index", pa.int32()),
    pa.field("seed", pa.int64()),
    pa.field("trial", pa.int16()),
    pa.field("judge", pa.string()),
    pa.field("system", pa.string()),
    pa.field("user", pa.string()),
    pa.field("frames_path", pa.string()),  # images: where the frames are, never their bytes
    pa.field("images_digest", pa.string()),
    pa.field("n_images", pa.int32()),
    pa.field("max_tokens", pa.int32()),  # as sent (a backend may add room for a structured answer: sent_max_tokens)
    pa.field("temperature", pa.float64()),  # of the first ask; null: none sent
    pa.field("choices", pa.list_(pa.string())),
    pa.field("json_schema_name", pa.string()),  # the schema's "title", when it has one
    pa.field("json_schema_digest", pa.string()),
    pa.field("verdict", pa.int8()),  # final outcome, as the verdict row has it
    pa.field("parse_status", pa.int8()),
    pa.field("detail", pa.string()),
    pa.field("error", pa.string()),
    pa.field("attempts", pa.list_(ATTEMPT)),
    pa.field("caption", pa.string()),  # the caption judged (sweeps fill it from the cell's captions)
    pa.field("cell_key", pa.string()),  # sweeps: the cell (the segment's name)
])
HIDDEN = [pa.field("_depth", pa.int16()), pa.field("_order", pa.int64())]
#: what the judging loop captures: everything but what the sweep adds at commit, plus the hidden columns
CAPTURE = pa.schema([f for f in TRANSCRIPTS if f.name not in ("caption", "cell_key")] + HIDDEN)

SUFFIX = ".parquet"
#: writer settings of the committed files (measured in tests/store/test_transcripts_compact.py)
WRITE_OPTIONS = {"compression": "zstd", "compression_level": 6, "use_dictionary": True,
                 "data_page_size": 4 << 20}
ROW_GROUP_ROWS = 1 << 16  # at most; a chunk of the judge loop (engine/judging/transcribe.py CHUNK) is one row group

Fix = Callable[[pa.Table], pa.Table]


def _finalize(t: pa.Table, fix: Fix | None, captions: "CaptionTexts | None" = None,
              cell_key: str | None = None) -> pa.Table:
    if fix is not None:
        t = fix(t)
    t = t.drop_columns([f.name for f in HIDDEN if f.name in t.column_names])
    if "caption" not in t.column_names:
        keys = t.column("caption_key")
        t = t.append_column("caption", captions.texts_of(keys) if captions is not None
                            else pa.nulls(t.num_rows, pa.string()))
    if "cell_key" not in t.column_names:
        t = t.append_column("cell_key", pa.array([cell_key] * t.num_rows, pa.string()))
    return t.select(TRANSCRIPTS.names).cast(TRANSCRIPTS)


class CaptionTexts:
    """caption_key -> text of the captions a cell's requests judge, kept as the Arrow columns they came in (no copy
    of a caption table handed whole) and looked up a chunk of transcript rows at a time: as a dict of Python strings
    a 100,000-item cell's 25,000 captions were ~9 MB held until the cell's end. A key added twice keeps its first
    text (a caption's key is a hash of its text). `add` may run while a spool's writer thread looks rows up: each
    lookup reads the pieces added before it."""

    def __init__(self, captions: pa.Table | None = None):
        self._keys: list[pa.ChunkedArray] = []
        self._texts: list[pa.ChunkedArray] = []
        if captions is not None:
            self.add(captions)

    @classmethod
    def of(cls, texts: dict[str, str | None]) -> "CaptionTexts":
        return cls(pa.table({"caption_key": pa.array(list(texts), pa.string()),
                             "text": pa.array(list(texts.values()), pa.string())}))

    def add(self, captions: pa.Table) -> None:
        """The `caption_key` and `text` columns of `captions` (referenced, not copied)."""
        self._texts.append(captions.column("text"))  # before its keys: a lookup never sees keys without texts
        self._keys.append(captions.column("caption_key"))

    def texts_of(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The text of each key (null: a null key, or one never added)."""
        pieces = len(self._keys)
        if not pieces:
            return pa.nulls(len(keys), pa.string())
        known = pa.chunked_array([c for k in self._keys[:pieces] for c in k.chunks], pa.string())
        texts = pa.chunked_array([c for t in self._texts[:pieces] for c in t.chunks], pa.string())
        at = pc.index_in(keys, value_set=known.combine_chunks(), skip_nulls=True)
        return texts.take(at).combine_chunks() if len(keys) else pa.array([], pa.string())


@dataclass(frozen=True)
class CommitForm:
    """What a committed file adds to the captured rows: the caption each row judged (the caller adds a caption to
    `captions` before it builds a request from it, so every row's is there when the row is written) and the cell's
    key."""

    captions: CaptionTexts
    cell_key: str | None = None


class MemoryTranscripts:
    """A sink that keeps the transcript table in memory (`table()` once the cell is finished)."""

    def __init__(self):
        self._chunks: list[pa.Table] = []
        self._fix: Fix | None = None
        self._done = False

    def append(self, chunk: pa.Table) -> None:
        self._chunks.append(chunk)

    def finish(self, fix: Fix | None = None) -> None:
        self._fix, self._done = fix, True

    def table(self) -> pa.Table:
        if not self._done:
            raise RuntimeError("transcripts: the cell is not finished")
        t = pa.concat_tables(self._chunks) if self._chunks else CAPTURE.empty_table()
        return _finalize(t, self._fix)


class TranscriptSpool:
    """A sink that spools chunks to `<folder>/.<name>.<random>.tmp` (a kill leaves only that temp file, which the
    next run removes) and at `commit` writes `<folder>/<name>.parquet` from it, atomically.

    With `commit_as`, the chunks are written in their committed form instead (the caption and cell key added, the
    hidden columns dropped, the committed file's compression: row group for row group the file `commit` would
    write), and `commit` only syncs the temp file and renames it into place: for cells whose rows `finish` has no
    corrections for (a `fix` is then an error).

    Chunks are written in order on a writer thread of the spool's own (Parquet encoding and compression release
    the GIL: the judge loop's thread goes on sending meanwhile), at most PENDING chunks behind; a write that fails
    is raised by the next `append` or by `finish`, as the same storage error."""

    PENDING = 2

    def __init__(self, folder: str | Path, name: str, *, commit_as: CommitForm | None = None):
        self.folder = Path(folder)
        self.name = name
        self.path = self.folder / f"{name}{SUFFIX}"
        self.commit_as = commit_as
        self._spool = self.folder / f".{name}.{uuid.uuid4().hex[:8]}.tmp"
        self._file = None  # the open temp file (committed form: synced before the rename)
        self._writer: pq.ParquetWriter | None = None
        self._fix: Fix | None = None
        self._done = False
        self._thread: ThreadPoolExecutor | None = None
        self._pending: deque[Future] = deque()
        self._closed: Future | None = None  # committed form: the temp file closed and synced (`finish`)

    def append(self, chunk: pa.Table) -> None:
        self._collect(self.PENDING - 1)  # an earlier write's error first; at most PENDING chunks queued
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="capeval-transcripts")
        self._pending.append(self._thread.submit(self._write, chunk))

    def _write(self, chunk: pa.Table) -> None:  # on the writer thread, chunk after chunk
        if self._writer is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._file = open(self._spool, "wb")
            if self.commit_as is None:  # fast settings for the spool: it is read once, at commit
                self._writer = pq.ParquetWriter(self._file, CAPTURE, compression="zstd", compression_level=1)
            else:
                self._writer = pq.ParquetWriter(self._file, TRANSCRIPTS, **WRITE_OPTIONS)
        if self.commit_as is None:
            self._writer.write_table(chunk.cast(CAPTURE))
        else:
            self._writer.write_table(_finalize(chunk, None, self.commit_as.captions, self.commit_as.cell_key),
                                     row_group_size=ROW_GROUP_ROWS)

    def _close(self, sync: bool) -> None:
        writer, f = self._writer, self._file
        self._writer = self._file = None
        try:
            if writer is not None:
                writer.close()
            if f is not None and sync:
                f.flush()
                os.fsync(f.fileno())
        finally:
            if f is not None:
                f.close()

    def _close_after(self, writes: list[Future]) -> None:  # on the writer thread, after `writes`
        for write in writes:
            write.result()
        self._close(sync=True)

    def _collect(self, keep: int = 0) -> None:
        """Wait until at most `keep` writes are queued; the first failed one is raised (OSError: storage error)."""
        while len(self._pending) > keep:
            try:
                self._pending.popleft().result()
            except OSError as exc:
                raise self._spool_error(exc) from exc
            except BaseException:
                self.discard()
                raise

    def _stop_thread(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None

    def finish(self, fix: Fix | None = None) -> None:
        if self.commit_as is not None:
            if fix is not None:
                raise ValueError(f"transcripts {self.name}: rows written in their committed form cannot be corrected")
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, thread_name_prefix="capeval-transcripts")
            # closed and synced on the writer thread after the queued writes: the judge loop goes on; `commit` waits
            # for it and names a write that failed
            writes, self._pending = list(self._pending), deque()
            self._closed = self._thread.submit(self._close_after, writes)
            self._thread.shutdown(wait=False)
            self._thread = None
            self._done = True
            return
        self._collect()
        self._stop_thread()
        try:
            self._close(sync=False)
        except OSError as exc:
            raise self._spool_error(exc) from exc
        self._fix, self._done = fix, True

    def _spool_error(self, exc: OSError):
        """A spool that cannot be written (disk full, read-only): the run stops with one line naming it (exit 4);
        the spool is removed (the cell is not committed, its transcripts are redone with it)."""
        self.discard()
        return storage_error(exc, self._spool, "the cell's judge transcripts (spool)")

    def commit(self, *, captions: CaptionTexts | None = None, cell_key: str | None = None) -> Path:
        """Write the committed file (row group by row group: memory stays one chunk) and rename it into place;
        `captions`: caption_key -> the caption text judged (with `commit_as`: none, the spool has them)."""
        return self.commit_later(captions=captions, cell_key=cell_key).place()

    def commit_later(self, *, captions: CaptionTexts | None = None, cell_key: str | None = None) -> "Commit":
        """`commit` in two steps: the committed file is written to a temp file on a thread of its own (Parquet
        compression releases the GIL: the caller computes the cell's metrics meanwhile); `place()` on the returned
        handle waits for it and renames it into place, `abandon()` drops it."""
        if not self._done:
            raise RuntimeError(f"transcripts {self.name}: commit before the cell finished")
        if self.commit_as is not None and (captions is not None or cell_key is not None):
            raise ValueError(f"transcripts {self.name}: written in their committed form (commit_as) already")
        return Commit(self, captions, cell_key)

    def _write_committed(self, tmp: Path, captions: CaptionTexts | None, cell_key: str | None) -> None:
        if not self._spool.exists():
            chunks = [CAPTURE.empty_table()]
        else:
            spool = pq.ParquetFile(self._spool)
            chunks = (spool.read_row_group(i) for i in range(spool.num_row_groups))
        _write_file(tmp, chunks, self._fix, captions, cell_key)

    def _written_committed(self) -> None:
        """The committed form's temp file: closed and synced (`finish`), or the empty file when no row came."""
        if self._closed is not None:
            self._closed.result()
        if not self._spool.exists():
            _write_file(self._spool, [CAPTURE.empty_table()], None, None, self.commit_as.cell_key)

    def discard(self) -> None:
        """Drop the spool (a cell that is not committed; a writer that cannot close, on a full disk, is let go)."""
        pending, self._pending = self._pending, deque()
        for future in pending:  # queued writes are dropped, the one under way is waited for
            future.cancel()
        self._stop_thread()
        if self._closed is not None:
            try:
                self._closed.result()
            except BaseException:  # noqa: BLE001 - the file is removed next
                pass
        try:
            self._close(sync=False)
        except OSError:
            pass  # its file is removed next: nothing it failed to write is wanted
        self._spool.unlink(missing_ok=True)


def _write_file(path: Path, chunks, fix: Fix | None, captions: CaptionTexts | None, cell_key: str | None) -> None:
    """A committed transcript file at `path` from captured chunks, one row group each, synced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        writer = pq.ParquetWriter(f, TRANSCRIPTS, **WRITE_OPTIONS)
        try:
            for chunk in chunks:
                writer.write_table(_finalize(chunk, fix, captions, cell_key), row_group_size=ROW_GROUP_ROWS)
        finally:
            writer.close()
        f.flush()
        os.fsync(f.fileno())


class Commit:
    """A spool's committed file being written (TranscriptSpool.commit_later)."""

    def __init__(self, spool: TranscriptSpool, captions: CaptionTexts | None, cell_key: str | None):
        self.spool = spool
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="capeval-transcripts-commit")
        if spool.commit_as is not None:  # written already: the temp file is the committed file
            self.tmp = spool._spool
            self._future = self._pool.submit(spool._written_committed)
        else:
            self.tmp = spool.folder / f".{spool.name}.{uuid.uuid4().hex[:8]}.tmp"
            self._future = self._pool.submit(spool._write_committed, self.tmp, captions, cell_key)
        self._pool.shutdown(wait=False)

    def place(self) -> Path:
        """Wait for the file and rename it into place (the spool is removed); a storage error names the file."""
        spool = self.spool
        try:
            self._future.result()
            os.replace(self.tmp, spool.path)
            fsync_dir(spool.folder)
        except OSError as exc:
            self.tmp.unlink(missing_ok=True)
            raise storage_error(exc, spool.path, "the cell's judge transcripts") from exc
        except BaseException:
            self.abandon()
            raise
        spool.discard()
        return spool.path

    def abandon(self) -> None:
        """Drop the file being written (the cell is not committed; its spool stays until discarded)."""
        try:
            self._future.result()
        except BaseException:  # noqa: BLE001 - what failed to be written is not wanted
            pass
        self.tmp.unlink(missing_ok=True)


def transcript_files(run_dir: str | Path) -> list[Path]:
    folder = Path(run_dir) / "transcripts"
    return sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []


def read_transcripts(paths, *, request_keys=None, columns: list[str] | None = None) -> pa.Table:
    """The rows of these transcript files (optionally only those of `request_keys`)."""
    parts = []
    for p in paths:
        t = pq.read_table(p, columns=columns)
        if request_keys is not None:
            t = t.filter(pc.is_in(t.column("request_key"), pa.array(list(request_keys), pa.string())))
        parts.append(t)
    if not parts:
        return TRANSCRIPTS.empty_table() if columns is None else TRANSCRIPTS.empty_table().select(columns)
    return pa.concat_tables(parts, promote_options="permissive")


def beside(verdicts_path: str | Path) -> Path:
    """Where `capeval judge --out V.parquet` puts the transcripts of V: `V.transcripts.parquet`."""
    p = Path(verdicts_path)
    return p.with_name(f"{p.stem}.transcripts{SUFFIX}")


def write_table(table: pa.Table, path: str | Path) -> Path:
    """A whole transcript table (MemoryTranscripts.table()) to `path`, atomically, with the committed settings."""
    return write_parquet_atomic(table.cast(TRANSCRIPTS), path, what="judge transcripts", row_group_size=1 << 16,
                                **WRITE_OPTIONS)
