"""Decoded-frame cache: each (video content, sampling spec, size) is decoded once per sweep.

Entries live under `cache_dir/<key[:2]>/<key>.npy` (uint8 (T, H, W, 3)) with `<key>.json` (timestamps and
decode facts) beside it. Both are written to a temporary name and renamed, the .json last, so a killed run
leaves either a complete entry or nothing that counts as one. The key is content-based
(`engine.keys.file_digest`), so a renamed or copied video still hits, and an edited one misses.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa

from engine import schemas
from engine.frames.decode import FramesResult, Size, VideoDecodeError, decode_frames, size_text
from engine.frames.sampling import FrameSpec, parse_frame_spec
from engine.keys import content_key, file_digest

_DIGESTS: dict[tuple[str, int, int], str] = {}

#: Number of real decodes done by this process through the cache (tests use it to prove a hit decodes nothing).
DECODES = {"count": 0}


def video_digest(path: str | Path) -> str:
    """file_digest, memoised per (path, size, mtime) so a sweep hashes each video once per process."""
    st = os.stat(path)
    memo = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _DIGESTS:
        _DIGESTS[memo] = file_digest(path)
    return _DIGESTS[memo]


def frames_key(digest: str, spec: str | FrameSpec, size: Size) -> str:
    return content_key("frames", digest, str(parse_frame_spec(spec)), size_text(size))


def _entry(cache_dir: str | Path, key: str) -> tuple[Path, Path]:
    d = Path(cache_dir) / key[:2]
    return d / f"{key}.npy", d / f"{key}.json"


def _atomic_write(target: Path, write: Callable) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def _ensure(path: Path, spec: FrameSpec, size: Size, cache_dir, threads) -> tuple[str, dict, Path, FramesResult | None]:
    """(key, meta, npy path, result-if-decoded-now); decodes and stores on a miss."""
    key = frames_key(video_digest(path), spec, size)
    npy, meta_path = _entry(cache_dir, key)
    if meta_path.exists() and npy.exists():
        return key, json.loads(meta_path.read_text()), npy, None
    result = decode_frames(path, spec, size, threads=threads)
    DECODES["count"] += 1
    meta = {
        "frames_key": key,
        "frame_spec": str(spec),
        "timestamps": result.timestamps.tolist(),
        "targets": result.targets.tolist(),
        "duration": result.duration,
        "frames_decoded": result.frames_decoded,
        "seeks": result.seeks,
        "rotation": result.rotation,
        "shape": list(result.frames.shape),
        "media_type": result.media_type,
    }
    _atomic_write(npy, lambda f: np.save(f, result.frames))
    _atomic_write(meta_path, lambda f: f.write(json.dumps(meta).encode()))
    result.path = str(npy)
    return key, meta, npy, result


def decode_frames_cached(
    path: str | Path, spec: str | FrameSpec, size: Size = None, cache_dir: str | Path = ".capeval/frames", *,
    threads: int | str = "auto",
) -> FramesResult:
    """Frames of `path` for `spec` at `size`, from the cache or decoded (and stored) now."""
    path, spec = Path(path), parse_frame_spec(spec)
    if not path.exists():
        decode_frames(path, spec, size)  # raises the same VideoNotFoundError a direct decode would
    key, meta, npy, result = _ensure(path, spec, size, cache_dir, threads)
    if result is not None:
        return result
    return FramesResult(
        frames=np.load(npy), timestamps=np.asarray(meta["timestamps"]), targets=np.asarray(meta["targets"]),
        frame_spec=meta["frame_spec"], duration=meta["duration"], frames_decoded=0, seeks=0,
        rotation=meta["rotation"], path=str(npy), cache_hit=True, info={"frames_key": key},
        media_type=meta.get("media_type", "video"),
    )


def frames_row(
    path: str | Path, video_id: str, spec: str | FrameSpec, size: Size, cache_dir: str | Path, *,
    threads: int | str = "auto",
) -> dict:
    """One FRAMES row for one video; a bad video gives a row with `error` set instead of raising."""
    spec = parse_frame_spec(spec)
    path = Path(path)
    try:
        key, meta, npy, _ = _ensure(path, spec, size, cache_dir, threads)
        _, h, w, _ = meta["shape"]
        return {"frames_key": key, "video_id": video_id, "frame_spec": str(spec), "timestamps": meta["timestamps"],
                "height": h, "width": w, "path": str(npy), "error": None,
                "media_type": meta.get("media_type", "video")}  # not a FRAMES column: extra key for the stages
    except Exception as exc:  # noqa: BLE001 - one bad video must not stop a sweep; the row says what happened
        message = str(exc) if isinstance(exc, VideoDecodeError) else f"{type(exc).__name__}: {path}: {exc}"
        if isinstance(exc, FileNotFoundError):
            message = f"not_found: {path}: no such file"
        try:
            ident = video_digest(path)
        except OSError:
            ident = f"path:{path.resolve()}"
        return {"frames_key": content_key("frames", ident, str(spec), size_text(size)), "video_id": video_id,
                "frame_spec": str(spec), "timestamps": None, "height": None, "width": None, "path": None,
                "error": message}


def rows_to_table(rows: list[dict]) -> pa.Table:
    if not rows:
        return schemas.empty(schemas.FRAMES)
    return schemas.conform(pa.Table.from_pylist(rows), schemas.FRAMES)


def decode_videos_table(
    paths: Iterable[str | Path], spec: str | FrameSpec, size: Size = None, cache_dir: str | Path = ".capeval/frames",
    *, video_ids: Iterable[str] | None = None, threads: int | str = "auto", progress: Callable[[int, int], None] | None = None,
) -> pa.Table:
    """FRAMES table for `paths` (one row each, in order; bad videos give error rows and the batch goes on).

    `video_ids` defaults to each file's stem. `progress(done, total)` is called after each video.
    """
    paths = [Path(p) for p in paths]
    ids = [p.stem for p in paths] if video_ids is None else [str(v) for v in video_ids]
    if len(ids) != len(paths):
        raise ValueError(f"{len(paths)} paths but {len(ids)} video_ids")
    spec = parse_frame_spec(spec)
    rows = []
    for n, (p, vid) in enumerate(zip(paths, ids), 1):
        rows.append(frames_row(p, vid, spec, size, cache_dir, threads=threads))
        if progress:
            progress(n, len(paths))
    return rows_to_table(rows)


def load_frames(row_or_path: dict | str | Path) -> np.ndarray:
    """The uint8 (T, H, W, 3) array of a FRAMES row (or its .npy path); fails on an error row, naming it."""
    if isinstance(row_or_path, dict):
        if row_or_path.get("error"):
            raise ValueError(f"video {row_or_path.get('video_id')!r} has no frames: {row_or_path['error']}")
        row_or_path = row_or_path["path"]
    return np.load(row_or_path)
