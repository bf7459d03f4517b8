"""Decoded-frame cache: each (video content, sampling spec, size) is decoded once, stored as JPEG in shards.

Frames are decoded at the size their consumer uses (capeval.engine.frames.sizes), JPEG-encoded once
(capeval.engine.frames.shards.JPEG_QUALITY) and appended to this process's shard under `cache_dir/shards/`; the cache is
capped (`cap_bytes`, default capeval.engine.frames.shards.default_cap_bytes) and evicts whole shards by last use. The key
is content-based (`capeval.engine.keys.file_digest`), so a renamed or copied video still hits, and an edited one misses.

A FRAMES row's `path` is a locator, not a file: `frames:<cache dir>?key=…&spec=…&size=…&src=<video>`. It names
the entry and how to make it again, so `load_frames` / `load_encoded_frames` decode the video again when the
entry was evicted (or damaged) meanwhile, instead of failing. A frame is JPEG-encoded once: `load_encoded_frames`
hands out the stored bytes, so a backend that sends JPEG never re-encodes. Older caches' `.npy` paths still load.
Every call that returns frames returns what the cache holds (the JPEG-decoded pixels), on a miss too, so a
frames key always means the same pixels.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable, Iterable
from urllib.parse import parse_qs, quote, unquote, urlencode

import numpy as np
import pyarrow as pa

from capeval.engine import schemas
from capeval.engine.frames import shards
from capeval.engine.frames.decode import FramesResult, VideoDecodeError, decode_frames
from capeval.engine.frames.sampling import FrameSpec
from capeval.engine.frames.sizes import Size, parse_size, size_text
from capeval.engine.keys import file_digest, frames_key

_DIGESTS: dict[tuple[str, int, int], str] = {}

#: Number of real decodes done by this process through the cache (tests use it to prove a hit decodes nothing).
DECODES = {"count": 0}

LOCATOR_PREFIX = "frames:"


def video_digest(path: str | Path) -> str:
    """file_digest, memoised per (path, size, mtime) so a sweep hashes each video once per process."""
    st = os.stat(path)
    memo = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _DIGESTS:
        _DIGESTS[memo] = file_digest(path)
    return _DIGESTS[memo]


def locator(cache_dir: str | Path, key: str, spec: str, size: Size, source: str | Path, digest: str = "") -> str:
    """The FRAMES `path` of an entry: where it is stored and what makes it again (the video's digest too, so the
    key of the same frames at another size can be derived: `frames_key_at`)."""
    query = urlencode({"key": key, "spec": str(spec), "size": size_text(size), "digest": digest,
                       "src": str(Path(source).resolve())})
    return f"{LOCATOR_PREFIX}{quote(str(Path(cache_dir).resolve()), safe='/')}?{query}"


def is_locator(path: object) -> bool:
    return isinstance(path, str) and path.startswith(LOCATOR_PREFIX)


def parse_locator(text: str) -> dict:
    """{cache_dir, key, spec, size, src} of a locator (a new dict each call); ValueError naming it when it is not
    one."""
    return dict(_locator_fields(text))


@functools.lru_cache(maxsize=4096)
def _locator_fields(text: str) -> tuple[tuple[str, str], ...]:
    """parse_locator's fields, parsed once per locator text: a caption task's locator is parsed twice (its frames
    read, then their decode record for the ledger), each a query-string parse on the caption actor's GIL."""
    if not is_locator(text) or "?" not in text:
        raise ValueError(f"not a frame-cache locator: {text!r}")
    where, query = text[len(LOCATOR_PREFIX):].split("?", 1)
    fields = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
    missing = {"key", "spec", "size", "src"} - set(fields)
    if missing:
        raise ValueError(f"frame-cache locator {text!r} lacks {sorted(missing)}")
    return tuple({"cache_dir": unquote(where), **fields}.items())


def frames_key_at(row: dict, size: Size) -> str:
    """The frames key of a FRAMES row's video and spec at `size` (the row's own key when it has that size, or
    when it comes from an older cache that did not record the video's digest)."""
    path = row.get("path")
    if not is_locator(path):
        return row["frames_key"]
    digest = parse_locator(path).get("digest")
    if not digest:
        return row["frames_key"]
    return frames_key(digest, str(FrameSpec.parse(row["frame_spec"])), size_text(size))


def _meta(key: str, spec: FrameSpec, size: Size, result: FramesResult) -> dict:
    return {"frames_key": key, "frame_spec": str(spec), "size": size_text(size),
            "timestamps": result.timestamps.tolist(), "targets": result.targets.tolist(),
            "duration": result.duration, "frames_decoded": result.frames_decoded, "seeks": result.seeks,
            "rotation": result.rotation, "shape": list(result.frames.shape), "media_type": result.media_type,
            # what the frames-seen ledger records (capeval.engine.frames.ledger); not part of the key
            "rate": result.info.get("rate"), "decoder": result.info.get("decoder"),
            "decoder_version": result.info.get("decoder_version")}


def _meta_fits(entry: shards.Entry, key: str) -> bool:
    """Whether a stored entry's decode facts are whole: its key, one shape (T, H, W, 3) with a length per frame, and
    the timestamps. A damaged entry is read as missing (decoded again), never a failure of its video."""
    meta = entry.meta
    shape = meta.get("shape")
    return (meta.get("frames_key") == key and isinstance(meta.get("timestamps"), list)
            and isinstance(shape, list) and len(shape) == 4 and all(isinstance(n, int) and n >= 0 for n in shape)
            and shape[0] == len(entry.lengths))


def _decode_and_store(path: Path, spec: FrameSpec, size: Size, cache_dir, threads, cap_bytes, key: str):
    """(meta, JPEG bytes, FramesResult) of a fresh decode, stored in this process's shard."""
    result = decode_frames(path, spec, size, threads=threads)
    DECODES["count"] += 1
    blobs = shards.encode_jpegs(result.frames)
    meta = _meta(key, spec, size, result)
    shards.writer_for(cache_dir, cap_bytes).put(key, blobs, meta)
    return meta, blobs, result


def ensure_frames(path: str | Path, spec: FrameSpec, size: Size, cache_dir: str | Path, *,
                  threads: int | str = "auto", cap_bytes: int | None = None) -> tuple[str, dict, str, bool]:
    """(key, meta, locator, hit) of `path` at `spec` and `size`, decoding and storing it on a miss; raises
    VideoDecodeError for bad media and OSError when the cache cannot be written."""
    path, size = Path(path), parse_size(size)
    digest = video_digest(path)
    key = frames_key(digest, str(spec), size_text(size))
    loc = locator(cache_dir, key, str(spec), size, path, digest)
    entry = shards.index_for(cache_dir).get(key)
    if entry is not None and _meta_fits(entry, key):
        return key, entry.meta, loc, True
    meta, _, _ = _decode_and_store(path, spec, size, cache_dir, threads, cap_bytes, key)
    return key, meta, loc, False


def decode_frames_cached(
    path: str | Path, spec: FrameSpec, size: Size = None, cache_dir: str | Path = ".capeval/frames", *,
    threads: int | str = "auto", cap_bytes: int | None = None,
) -> FramesResult:
    """Frames of `path` for `spec` at `size`, from the cache or decoded (and stored) now; the pixels are the
    stored ones either way."""
    path = Path(path)
    if not path.exists():
        decode_frames(path, spec, size)  # raises the same VideoNotFoundError a direct decode would
    before = DECODES["count"]
    key, meta, loc, hit = ensure_frames(path, spec, size, cache_dir, threads=threads, cap_bytes=cap_bytes)
    frames = load_frames(loc)
    return FramesResult(
        frames=frames, timestamps=np.asarray(meta["timestamps"]), targets=np.asarray(meta["targets"]),
        frame_spec=meta["frame_spec"], duration=meta["duration"],
        frames_decoded=0 if hit else meta["frames_decoded"], seeks=0 if hit else meta["seeks"],
        rotation=meta["rotation"], path=loc, cache_hit=hit and DECODES["count"] == before,
        info={"frames_key": key, "size": meta.get("size")}, media_type=meta.get("media_type", "video"),
    )


def frames_row(
    path: str | Path, video_id: str, spec: FrameSpec, size: Size, cache_dir: str | Path, *,
    threads: int | str = "auto", cap_bytes: int | None = None,
) -> dict:
    """One FRAMES row for one video; a bad video gives a row with `error` set instead of raising."""
    path = Path(path)
    try:
        key, meta, loc, _ = ensure_frames(path, spec, size, cache_dir, threads=threads, cap_bytes=cap_bytes)
        _, h, w, _ = meta["shape"]
        return {"frames_key": key, "video_id": video_id, "frame_spec": str(spec), "timestamps": meta["timestamps"],
                "height": h, "width": w, "path": loc, "error": None,
                "media_type": meta.get("media_type", "video")}  # not a FRAMES column: extra key for the stages
    except Exception as exc:  # noqa: BLE001 - one bad video must not stop a sweep; the row says what happened
        message = str(exc) if isinstance(exc, VideoDecodeError) else f"{type(exc).__name__}: {path}: {exc}"
        if isinstance(exc, FileNotFoundError):
            message = f"not_found: {path}: no such file"
        try:
            ident = video_digest(path)
        except OSError:
            ident = f"path:{path.resolve()}"
        return {"frames_key": frames_key(ident, str(spec), size_text(size)), "video_id": video_id,
                "frame_spec": str(spec), "timestamps": None, "height": None, "width": None, "path": None,
                "error": message}


def rows_to_table(rows: list[dict]) -> pa.Table:
    if not rows:
        return schemas.empty(schemas.FRAMES)
    return schemas.conform(pa.Table.from_pylist(rows), schemas.FRAMES)


def decode_videos_table(
    paths: Iterable[str | Path], spec: FrameSpec, size: Size = None, cache_dir: str | Path = ".capeval/frames",
    *, video_ids: Iterable[str] | None = None, threads: int | str = "auto", progress: Callable[[int, int], None] | None = None,
) -> pa.Table:
    """FRAMES table for `paths` (one row each, in order; bad videos give error rows and the batch goes on).

    `video_ids` defaults to each file's stem. `progress(done, total)` is called after each video.
    """
    paths = [Path(p) for p in paths]
    ids = [p.stem for p in paths] if video_ids is None else [str(v) for v in video_ids]
    if len(ids) != len(paths):
        raise ValueError(f"{len(paths)} paths but {len(ids)} video_ids")
    rows = []
    for n, (p, vid) in enumerate(zip(paths, ids), 1):
        rows.append(frames_row(p, vid, spec, size, cache_dir, threads=threads))
        if progress:
            progress(n, len(paths))
    return rows_to_table(rows)


def _path_of(row_or_path: dict | str | Path) -> str:
    if isinstance(row_or_path, dict):
        if row_or_path.get("error"):
            raise ValueError(f"video {row_or_path.get('video_id')!r} has no frames: {row_or_path['error']}")
        if not row_or_path.get("path"):
            raise ValueError(f"video {row_or_path.get('video_id')!r}: FRAMES row without a path")
        return str(row_or_path["path"])
    return str(row_or_path)


def load_encoded_frames(row_or_path: dict | str | Path) -> tuple[bytes, ...] | None:
    """The stored JPEG bytes (one per frame) of a FRAMES row or locator, or None when its frames are not stored as
    JPEG (an older cache's .npy). An entry evicted or damaged since is decoded again from its video."""
    text = _path_of(row_or_path)
    if not is_locator(text):
        return None
    loc = parse_locator(text)
    index = shards.index_for(loc["cache_dir"])
    entry = index.get(loc["key"])
    if entry is not None:
        blobs = shards.read_entry(entry)
        if blobs is not None:
            return blobs
        index.forget(loc["key"], entry)
    # Gone (evicted, even mid-use) or damaged: make it again, exactly as the first time.
    src, spec, size = Path(loc["src"]), FrameSpec.parse(loc["spec"]), parse_size(loc["size"])
    if not src.exists():
        raise FileNotFoundError(f"frames {loc['key']} left the frame cache and their video {src} is gone")
    if frames_key(video_digest(src), str(spec), size_text(size)) != loc["key"]:
        raise ValueError(f"frames {loc['key']} left the frame cache and their video {src} has changed since")
    _, blobs, _ = _decode_and_store(src, spec, size, loc["cache_dir"], 1, None, loc["key"])
    return blobs


def frames_meta(row_or_path: dict | str | Path) -> dict | None:
    """What the decode of a FRAMES row (or locator) recorded beside its frames (timestamps, duration, rate, decoder
    and its version ...), or None when the cache holds no entry for it (an older cache's .npy, an evicted entry)."""
    text = _path_of(row_or_path)
    if not is_locator(text):
        return None
    loc = parse_locator(text)
    entry = shards.index_for(loc["cache_dir"]).get(loc["key"])
    return dict(entry.meta) if entry is not None and _meta_fits(entry, loc["key"]) else None


def load_frames(row_or_path: dict | str | Path) -> np.ndarray:
    """The uint8 (T, H, W, 3) array of a FRAMES row (or its locator or an older cache's .npy path); fails on an
    error row, naming it."""
    blobs = load_encoded_frames(row_or_path)
    if blobs is None:
        return np.load(_path_of(row_or_path))
    return shards.decode_jpegs(blobs)
