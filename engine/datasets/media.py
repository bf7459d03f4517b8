"""Finding a dataset's media files under a media root."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.frames.images import IMAGE_SUFFIXES

VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".mov", ".avi", ".m4v", ".gif")


def media_suffixes() -> tuple[str, ...]:
    return VIDEO_SUFFIXES + tuple(sorted(IMAGE_SUFFIXES))


def find_media(root: Path, name: str) -> str:
    """root/name when it exists, else root/name.<suffix> for the first suffix present, else root/name.mp4 (reported
    as missing by whoever needs the file)."""
    exact = root / name
    if exact.is_file():
        return str(exact)
    for suffix in VIDEO_SUFFIXES:
        p = root / f"{name}{suffix}"
        if p.is_file():
            return str(p)
    return str(exact if Path(name).suffix else root / f"{name}.mp4")


def media_of_items(items, root: Path) -> dict[str, str]:
    """video_id -> media path under `root` (find_media) for each distinct video of an items table, in first-seen
    order: the media map of a dataset kind whose videos sit in one folder."""
    return {v: find_media(root, v) for v in dict.fromkeys(items.column("video_id").to_pylist())}


def filter_limit(items, limit: int | None):
    """The items of the first `limit` videos (sorted by video_id), for quick runs."""
    if not limit:
        return items
    import pyarrow as pa
    import pyarrow.compute as pc

    keep = sorted(set(items.column("video_id").to_pylist()))[:limit]
    return items.filter(pc.is_in(items.column("video_id"), value_set=pa.array(keep, pa.string())))
