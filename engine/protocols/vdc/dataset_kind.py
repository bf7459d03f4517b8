"""`vdc`: VDC's question sets (AuroraCap's `<kind>.jsonl`: one {video_id: [QA pairs]} object per line), one file or
the folder holding the five kinds' files (short, detailed, background, main_object, camera; `kinds` picks some),
plus the videos under `media_root`, named by the video id (`<id>.mp4` or another video suffix).

One item per QA pair, task = the kind; an id on several lines of a file is judged with its last line's questions,
as the official script does, and the replaced lines are reported (engine/protocols/vdc/release.py)."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.datasets.media import media_of_items
from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, resolve

from .release import KINDS, kind_files, kinds_problem, load_vdc, resolve_kinds


def _check(params: dict, base: Path) -> list[str]:
    try:
        resolve_kinds(resolve(base, params["path"]), params.get("kinds"))
    except ValueError as exc:
        return [f"path: {exc}"]
    return []


def _files_in_folder(folder: Path, params: dict) -> list[Path]:
    return kind_files(folder, params.get("kinds"))


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    path = resolve(base_dir, params["path"])
    items = load_vdc(path, params.get("kinds"))
    if "media_root" in params:
        root = resolve(base_dir, params["media_root"])
    else:
        root = path if path.is_dir() else path.parent
    return DatasetLoad(items, media_of_items(items, root))


KIND = DatasetKind(
    "vdc", __doc__.split("\n\n")[0],
    (Param("path", (str,), "one kind's QA file (<kind>.jsonl), or the folder holding them", required=True,
           path="file_or_dir"),
     Param("kinds", (list,), f"the kinds to read (default: every file of the folder; one kind names the questions "
                             f"of a file whose name is not <kind>.jsonl): {', '.join(KINDS)}", check=kinds_problem),
     Param("media_root", (str,), "folder of the videos, named by video id (default: the QA files' folder)",
           path="dir")),
    load, reads_only=True, extra_check=_check, files_in_folder=_files_in_folder,
)
