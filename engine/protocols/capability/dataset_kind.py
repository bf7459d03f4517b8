"""`capability`: the CAPability release layout: `annotations/<task>.jsonl` (13 tasks; images for 9, videos for 4)
plus the media the records' `file_path` name, relative to the release root (the folder holding `annotations/`) or
to `media_root`."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, resolve
from capeval.engine.errors import UsageError

from .codes import TASKS
from .release import annotation_files, load_items


def _tasks(v) -> str | None:
    bad = [t for t in v if t not in TASKS]
    return f"unknown task(s) {bad}; tasks: {', '.join(TASKS)}" if bad else None


def release_root(annotations: Path) -> Path:
    """The folder the records' file_path are relative to: the parent of annotations/ (of a task file's folder)."""
    folder = annotations.parent if annotations.is_file() else annotations
    return folder.parent


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    annotations = resolve(base_dir, params["path"])
    root = resolve(base_dir, params["media_root"]) if "media_root" in params else release_root(annotations)
    items = load_items(annotations, tuple(params.get("tasks") or TASKS), media_root=root)
    media = {}
    for vid, task, path in zip(items.column("video_id").to_pylist(), items.column("task").to_pylist(),
                               items.column("media_path").to_pylist()):
        if media.setdefault(vid, path) != path:
            raise UsageError(f"{annotations}: file_id {vid!r} names two media files ({media[vid]} and {path}, task "
                             f"{task!r}); capeval keys media by file_id")
    return DatasetLoad(items, media)


def extra_roots(path: Path, params: dict) -> list[Path]:
    """Without `media_root`, the records' file_path are relative to the release root: media may lie there."""
    return [] if "media_root" in params else [release_root(path)]


def files_in_folder(folder: Path, params: dict) -> list[Path]:
    """The task files the loader reads from an annotations/ folder (the tasks asked for that exist)."""
    try:
        return [p for _, p in annotation_files(folder, tuple(params.get("tasks") or TASKS)) if p.is_file()]
    except (OSError, ValueError):
        return []


KIND = DatasetKind(
    "capability", __doc__.split("\n\n")[0],
    (Param("path", (str,), "the release's annotations/ folder, or one <task>.jsonl", required=True,
           path="file_or_dir"),
     Param("media_root", (str,), "folder the records' file_path are relative to (default: the release root)",
           path="dir"),
     Param("tasks", (list,), "only these tasks (default: every task file present)", check=_tasks)),
    load, reads_only=True, extra_roots=extra_roots, files_in_folder=files_in_folder,
)
