"""`videos`: a folder (searched recursively) or a glob of videos and images, one item each, for reference-free
protocols (a judge that sees the video, no annotations) or caption-only sweeps. item_id = video_id = the path
relative to the folder, without its suffix; media_type from the suffix (JPEG/PNG/WebP/BMP are images)."""

from __future__ import annotations

import glob as globmod
from pathlib import Path

import pyarrow as pa

from capeval.engine.datasets.media import media_suffixes
from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, resolve
from capeval.engine.frames.images import media_type_of
from capeval.engine.schemas import ITEMS


def media_files(params: dict, base_dir: Path) -> tuple[Path, list[Path]]:
    """(root the ids are relative to, sorted media files)."""
    target = resolve(base_dir, params["path"])
    suffixes = set(media_suffixes())
    if target.is_dir():
        pattern = "**/*" if params.get("recursive", True) else "*"
        root, files = target, [p for p in target.glob(pattern) if p.is_file()]
    else:
        files = [Path(p) for p in globmod.glob(str(target), recursive=True) if Path(p).is_file()]
        root = Path(str(target).split("*")[0].split("?")[0].split("[")[0])
        root = root if root.is_dir() else root.parent
    files = sorted(p for p in files if p.suffix.lower() in suffixes and not p.name.startswith("."))
    return root, files


def _check(params: dict, base_dir: Path) -> list[str]:
    _, files = media_files(params, base_dir)
    return [] if files else [f"path: no videos or images in {resolve(base_dir, params['path'])} "
                             f"(suffixes: {', '.join(media_suffixes())})"]


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    root, files = media_files(params, base_dir)
    rows, media = [], {}
    for f in files:
        rel = f.relative_to(root) if f.is_relative_to(root) else Path(f.name)
        vid = str(rel.with_suffix("")).replace("\\", "/")
        if vid in media:  # clip.mp4 and clip.jpg side by side: keep both, told apart by suffix
            vid = str(rel).replace("\\", "/")
        media[vid] = str(f.resolve())
        rows.append({"benchmark": params.get("benchmark", "videos"), "task": params.get("task", "caption"),
                     "item_id": vid, "video_id": vid, "media_path": media[vid], "media_type": media_type_of(f)})
    return DatasetLoad(pa.Table.from_pylist(rows, schema=ITEMS), media)


KIND = DatasetKind(
    "videos", __doc__.split("\n\n")[0],
    (Param("path", (str,), "a folder or a glob such as 'clips/**/*.mp4'", required=True, path="glob"),
     Param("recursive", (bool,), "search sub-folders of a folder (default true)"),
     Param("benchmark", (str,), "benchmark column of the items (default 'videos')"),
     Param("task", (str,), "task column of the items (default 'caption')")),
    load, extra_check=_check, reads_only=True,
)
