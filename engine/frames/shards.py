"""Sharded JPEG frame store: many videos' frames per file, appended atomically, capped with LRU eviction.

Layout under `<cache_dir>/shards/`: each writing process appends to its own shard, `<name>.jpgs` (the JPEG bytes of
every frame of every entry, back to back) with `<name>.idx` beside it (one JSON line per entry: key, offset,
frame lengths, CRC-32 of the bytes, decode facts). A process rolls to a new shard when its shard reaches
`shard_bytes`, so a run folder holds ~2 files per `shard_bytes` of frames plus 2 per decode worker, however many
videos it decodes.

Kill -9 safety: an entry's bytes are written first, its index line last, in one write() of one line. A process
killed in between leaves bytes that no index line points to (garbage, removed with its shard), or half a line
without its newline (ignored by readers). Readers check each index line (an entry's fields, frame lengths within
bounds, bytes within its shard: a damaged line never makes a reader allocate what it claims) and the CRC, so an
entry counts only when it is complete; a damaged or missing entry reads as "not stored" and the caller decodes
again. No fsync: a killed process loses
nothing the kernel already has; after a power loss the CRC catches what did not reach the disk.

Eviction, by last use: a read touches its shard's mtime (at most once a minute per shard and process); when the
shards pass the cap, the writer removes whole shards, least recently used first, never its own open shard. A
reader that loses an entry to eviction (even mid-use) decodes it again (capeval.engine.frames.cache); never an error.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHARD_DIR = "shards"
#: JPEG quality of stored frames (Pillow, 4:2:0 chroma): visually lossless for captioning, ~1/10 of raw bytes
#: on natural content; docs/frames.md has the measured bytes per frame.
JPEG_QUALITY = 90
#: a writer starts a new shard past this size (also at most 1/8 of the cap, so eviction stays fine-grained)
SHARD_BYTES = 2 << 30
#: default cap of a frame cache (shard bytes), overridden by $CAPEVAL_FRAME_CACHE_GB
DEFAULT_CAP_BYTES = 50 << 30
_TOUCH_EVERY_S = 60.0
#: bounds of an index line's claims (larger ones are damage, read as a missing entry): frames per entry, and bytes
#: per JPEG frame (an 8K frame at JPEG_QUALITY is a few MB)
MAX_FRAMES_PER_ENTRY = 100_000
MAX_FRAME_BYTES = 256 << 20


def default_cap_bytes() -> int:
    """The frame cache cap: $CAPEVAL_FRAME_CACHE_GB (GiB, may be fractional) or DEFAULT_CAP_BYTES."""
    raw = os.environ.get("CAPEVAL_FRAME_CACHE_GB", "").strip()
    if not raw:
        return DEFAULT_CAP_BYTES
    try:
        gb = float(raw)
    except ValueError:
        raise ValueError(f"$CAPEVAL_FRAME_CACHE_GB must be a number of GiB, got {raw!r}") from None
    if not gb > 0:
        raise ValueError(f"$CAPEVAL_FRAME_CACHE_GB must be > 0, got {raw!r}")
    return int(gb * (1 << 30))


def encode_jpegs(frames: np.ndarray, quality: int = JPEG_QUALITY) -> tuple[bytes, ...]:
    from PIL import Image

    out = []
    for frame in frames:
        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(frame, dtype=np.uint8)).save(buf, format="JPEG", quality=quality)
        out.append(buf.getvalue())
    return tuple(out)


def decode_jpegs(blobs: tuple[bytes, ...]) -> np.ndarray:
    """uint8 (T, H, W, 3) from JPEG bytes (ValueError when the frames differ in size).

    The caption actor decodes every task's frames here, on the GIL its in-process engine fills with, so each frame
    takes as few Python steps as it can with the same pixels: opened as JPEG only (the stored bytes are
    `encode_jpegs`'s; no other format is probed), converted only when it is not RGB already (a conversion of an
    RGB image is a copy), and written into its place in the result (no list of arrays stacked after)."""
    from PIL import Image

    out = None
    for i, blob in enumerate(blobs):
        image = Image.open(io.BytesIO(blob), formats=("JPEG",))
        if image.mode != "RGB":
            image = image.convert("RGB")
        frame = np.asarray(image)
        if out is None:
            out = np.empty((len(blobs), *frame.shape), np.uint8)
        elif frame.shape != out.shape[1:]:
            raise ValueError(f"JPEG frames of different sizes: frame {i} is {frame.shape}, frame 0 {out.shape[1:]}")
        out[i] = frame
    return out if out is not None else np.zeros((0, 0, 0, 3), np.uint8)


@dataclass(frozen=True)
class Entry:
    shard: str  # the .jpgs file
    offset: int
    lengths: tuple[int, ...]
    crc: int
    meta: dict


def _shard_dir(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / SHARD_DIR


def parse_index_line(line: bytes, shard: str, shard_size: int) -> tuple[str, Entry]:
    """(key, Entry) of one index line of `shard`; ValueError when the line is damaged: not an entry's fields and
    types, a frame length out of bounds, or bytes that do not lie within the shard's `shard_size` bytes."""
    rec = json.loads(line)
    key, offset, lengths, crc, meta = rec["key"], rec["off"], rec["lens"], rec["crc"], rec["meta"]
    if not (isinstance(key, str) and isinstance(meta, dict) and _is_int(offset) and _is_int(crc)
            and isinstance(lengths, list) and len(lengths) <= MAX_FRAMES_PER_ENTRY):
        raise ValueError(f"index line of {shard}: not an entry")
    if not all(_is_int(n) and 0 < n <= MAX_FRAME_BYTES for n in lengths):
        raise ValueError(f"index line of {shard}: a frame length out of bounds")
    if offset < 0 or offset + sum(lengths) > shard_size:
        raise ValueError(f"index line of {shard}: bytes {offset}+{sum(lengths)} beyond the shard's {shard_size}")
    return key, Entry(shard, offset, tuple(lengths), crc, meta)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_entry(entry: Entry) -> tuple[bytes, ...] | None:
    """The entry's JPEG bytes, or None when its shard is gone, the entry does not lie within it (nothing is read,
    whatever length it claims) or the bytes are incomplete or damaged."""
    try:
        with open(entry.shard, "rb") as f:
            size = sum(entry.lengths)
            if entry.offset < 0 or entry.offset + size > os.fstat(f.fileno()).st_size:
                return None
            f.seek(entry.offset)
            data = f.read(size)
    except OSError:
        return None
    if len(data) != sum(entry.lengths) or zlib.crc32(data) != entry.crc:
        return None
    _touch(entry.shard)
    out, at = [], 0
    for n in entry.lengths:
        out.append(data[at:at + n])
        at += n
    return tuple(out)


_TOUCHED: dict[str, float] = {}


def _touch(shard: str) -> None:
    """Mark the shard used now (its mtime is its last use, for LRU eviction); cheap enough once a minute."""
    now = time.time()
    if now - _TOUCHED.get(shard, 0.0) < _TOUCH_EVERY_S:
        return
    _TOUCHED[shard] = now
    try:
        os.utime(shard)
    except OSError:
        pass  # evicted meanwhile: the bytes already read are still good


class ShardIndex:
    """key -> Entry over every shard of a cache dir, read incrementally (only the new bytes of each .idx)."""

    def __init__(self, cache_dir: str | Path):
        self.dir = _shard_dir(cache_dir)
        self.entries: dict[str, Entry] = {}
        self.read_to: dict[str, int] = {}
        self.bad: set[tuple[str, int]] = set()  # (shard, offset) of entries found damaged or gone
        self.lock = threading.Lock()

    def get(self, key: str) -> Entry | None:
        with self.lock:
            if key not in self.entries:
                self._refresh()
            return self.entries.get(key)

    def forget(self, key: str, entry: Entry) -> None:
        """Drop a stale entry (its shard was evicted or its bytes are damaged) so the next get looks again."""
        with self.lock:
            self.bad.add((entry.shard, entry.offset))
            if self.entries.get(key) == entry:
                del self.entries[key]

    def _refresh(self) -> None:
        try:
            names = [n for n in os.listdir(self.dir) if n.endswith(".idx")]
        except FileNotFoundError:
            names = []
        live = {str(self.dir / n) for n in names}
        for gone in set(self.read_to) - live:
            del self.read_to[gone]
        self.entries = {k: e for k, e in self.entries.items() if e.shard[:-len(".jpgs")] + ".idx" in live}
        for idx in sorted(live):
            self._read(idx)

    def _read(self, idx: str) -> None:
        start = self.read_to.get(idx, 0)
        try:
            with open(idx, "rb") as f:
                f.seek(start)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # a line without its newline is a write a kill interrupted
        shard = idx[:-len(".idx")] + ".jpgs"
        try:  # an entry's bytes are written before its line, so every whole line read above lies within this size
            shard_size = os.stat(shard).st_size
        except OSError:
            shard_size = 0  # evicted meanwhile: its entries are gone
        for line in data[:end].splitlines():
            try:
                key, entry = parse_index_line(line, shard, shard_size)
            except (ValueError, KeyError, TypeError):
                continue  # a damaged line is one entry fewer, decoded again when asked for
            if (shard, entry.offset) not in self.bad:
                self.entries[key] = entry
        self.read_to[idx] = start + end


class ShardWriter:
    """Appends entries to this process's shard of one cache dir (one writer per process and dir: `writer_for`)."""

    def __init__(self, cache_dir: str | Path, cap_bytes: int):
        self.dir = _shard_dir(cache_dir)
        self.cap = int(cap_bytes)
        self.lock = threading.Lock()
        self.pid = None
        self.data_fd = self.idx_fd = None
        self.data_path = ""

    def _open_new(self) -> None:
        self.close()
        self.dir.mkdir(parents=True, exist_ok=True)
        stem = f"{time.strftime('%Y%m%d%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.data_path = str(self.dir / f"{stem}.jpgs")
        self.data_fd = os.open(self.data_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.idx_fd = os.open(str(self.dir / f"{stem}.idx"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.pid = os.getpid()

    def _usable(self) -> bool:
        if self.data_fd is None or self.pid != os.getpid():
            return False
        try:
            st = os.fstat(self.data_fd)
            on_disk = os.stat(self.data_path)
        except OSError:
            return False  # evicted by another process: its entries are gone, start afresh
        return st.st_ino == on_disk.st_ino and st.st_size < min(SHARD_BYTES, max(64 << 10, self.cap // 8))

    def put(self, key: str, blobs: tuple[bytes, ...], meta: dict) -> Entry:
        data = b"".join(blobs)
        with self.lock:
            if not self._usable():
                self._open_new()
            offset = os.fstat(self.data_fd).st_size
            idx_size = os.fstat(self.idx_fd).st_size
            entry = Entry(self.data_path, offset, tuple(len(b) for b in blobs), zlib.crc32(data), meta)
            line = json.dumps({"key": key, "off": offset, "lens": list(entry.lengths), "crc": entry.crc,
                               "meta": meta}, separators=(",", ":")).encode() + b"\n"
            try:
                _write_all(self.data_fd, data)
                _write_all(self.idx_fd, line)  # the commit point: the entry exists once its line is whole
            except OSError:
                for fd, size in ((self.data_fd, offset), (self.idx_fd, idx_size)):
                    try:
                        os.ftruncate(fd, size)  # a full disk must not leave half an entry behind
                    except OSError:
                        pass
                raise
            evict(self.dir.parent, self.cap, keep={self.data_path})
            return entry

    def close(self) -> None:
        for fd in (self.data_fd, self.idx_fd):
            if fd is not None and self.pid == os.getpid():
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.data_fd = self.idx_fd = None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def shard_files(cache_dir: str | Path) -> list[tuple[Path, os.stat_result]]:
    """(path, stat) of every shard data and index file."""
    out = []
    d = _shard_dir(cache_dir)
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return out
    for n in names:
        if n.endswith((".jpgs", ".idx")):
            try:
                out.append((d / n, os.stat(d / n)))
            except FileNotFoundError:
                continue  # evicted meanwhile
    return out


def cache_bytes(cache_dir: str | Path) -> int:
    return sum(st.st_size for _, st in shard_files(cache_dir))


def evict(cache_dir: str | Path, cap_bytes: int, keep: set[str] = frozenset()) -> list[str]:
    """Remove whole shards, least recently used first, until the shards fit in `cap_bytes`; returns their paths.
    The index goes first, so no reader finds an entry whose bytes are being removed (and if one already has
    it, its read fails and it decodes again)."""
    files = shard_files(cache_dir)
    total = sum(st.st_size for _, st in files)
    if total <= cap_bytes:
        return []
    sizes = {str(p): st.st_size for p, st in files}
    shards = sorted((st.st_mtime, str(p)) for p, st in files if p.suffix == ".jpgs" and str(p) not in keep)
    removed = []
    for _, data in shards:
        if total <= cap_bytes:
            break
        idx = data[:-len(".jpgs")] + ".idx"
        for path in (idx, data):
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            total -= sizes.get(path, 0)
        removed.append(data)
    return removed


def entries(cache_dir: str | Path) -> dict[str, Entry]:
    """key -> Entry of every complete entry a cache dir's shards index now (read afresh)."""
    index = ShardIndex(cache_dir)
    index._refresh()
    return dict(index.entries)


_WRITERS: dict[tuple[int, str], ShardWriter] = {}
_INDEXES: dict[tuple[int, str], ShardIndex] = {}
_REGISTRY_LOCK = threading.Lock()


def writer_for(cache_dir: str | Path, cap_bytes: int | None = None) -> ShardWriter:
    key = (os.getpid(), str(Path(cache_dir).resolve()))
    with _REGISTRY_LOCK:
        w = _WRITERS.get(key)
        if w is None:
            w = _WRITERS[key] = ShardWriter(cache_dir, default_cap_bytes() if cap_bytes is None else cap_bytes)
        elif cap_bytes is not None:
            w.cap = int(cap_bytes)
        return w


def index_for(cache_dir: str | Path) -> ShardIndex:
    key = (os.getpid(), str(Path(cache_dir).resolve()))
    with _REGISTRY_LOCK:
        if key not in _INDEXES:
            _INDEXES[key] = ShardIndex(cache_dir)
        return _INDEXES[key]
