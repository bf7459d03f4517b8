"""`vatex_eval`: VATEX-EVAL's human-rated candidate captions (VC-Inspector's correlation benchmark; the folder
holding vid_cans_score_dict.json) plus the VATEX clips under `media_root`. Read by vatex_eval.py beside it:
one item per candidate, the candidates come with the dataset as captions, the ratings ride in the items."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.datasets.media import media_of_items
from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, resolve

def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    from . import vatex_eval  # deferred: polars, loaded when the kind is used

    path = resolve(base_dir, params["path"])
    items = vatex_eval.load_items(path)
    captions = vatex_eval.load_captions(path)
    root = resolve(base_dir, params["media_root"]) if "media_root" in params else (
        path if path.is_dir() else path.parent)
    media = media_of_items(items, root)
    return DatasetLoad(items, media, captions)


def _files_in_folder(folder: Path, params: dict) -> list[Path]:
    """The score file the loader reads when `path` is the VATEX-EVAL folder (staging ships it)."""
    from .vatex_eval import FILE  # deferred: polars, loaded when the kind is used

    return [folder / FILE]


def _ratings(folder: Path):
    """The annotators' ratings of each candidate (`capeval align --dataset vatex_eval`)."""
    from .vatex_eval import load_ratings  # deferred: polars, loaded when the kind is used

    return load_ratings(folder)


KIND = DatasetKind(
    "vatex_eval", __doc__.split("\n\n")[0],
    (Param("path", (str,), "the folder holding vid_cans_score_dict.json",
           required=True, path="file_or_dir"),
     Param("media_root", (str,), "folder of the VATEX clips", path="dir")),
    load, needs_media=False, reads_only=True, files_in_folder=_files_in_folder, ratings=_ratings,
)
