"""`vidcapbench`: VidCapBench's QA file (the AE or HE set: one {video_dir, QA_pairs} object per line) plus the
folder of its videos (`media_root`; each `video_dir` names a file in it, with or without a suffix)."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.datasets.media import media_of_items
from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, resolve

from .release import load_vidcapbench


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    path = resolve(base_dir, params["path"])
    items = load_vidcapbench(path)
    root = resolve(base_dir, params["media_root"]) if "media_root" in params else path.parent
    media = media_of_items(items, root)
    return DatasetLoad(items, media)


KIND = DatasetKind(
    "vidcapbench", __doc__.split("\n\n")[0],
    (Param("path", (str,), "the QA file (JSON lines or one JSON array)", required=True, path="file"),
     Param("media_root", (str,), "folder of the videos (default: the QA file's folder)", path="dir")),
    load, needs_media=True, reads_only=True,
)
