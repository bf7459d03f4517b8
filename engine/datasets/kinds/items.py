"""`items`: a table of items (JSONL, CSV or Parquet, the columns in docs/inputs.md) whose `media_path` name the
videos and images; relative media paths resolve against the table's folder."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, resolve
from capeval.engine.inputs import read_items


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    items = read_items(resolve(base_dir, params["path"]), benchmark=params.get("benchmark"))
    media = {}
    for vid, path in zip(items.column("video_id").to_pylist(), items.column("media_path").to_pylist()):
        if path is not None:
            media.setdefault(vid, path)
    return DatasetLoad(items, media)


KIND = DatasetKind(
    "items", __doc__.split("\n\n")[0],
    (Param("path", (str,), "the items file (.jsonl, .csv, .tsv or .parquet)", required=True, path="file"),
     Param("benchmark", (str,), "benchmark name for rows without one (default: 'items')")),
    load, needs_media=False, reads_only=True,
)
