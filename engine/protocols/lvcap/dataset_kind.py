"""`dream1k`: DREAM-1K's `DREAM-1k.jsonl` (reference description and events per clip) plus its videos under
`media_root`, named by the clip's `vid` (`<vid>.mp4` or another video suffix); `unit = "events"` gives one item per
reference event instead of one per clip."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.datasets.media import media_of_items
from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, resolve

from .dream1k import load_clips, load_events


def _unit(v) -> str | None:
    return None if v in ("clips", "events") else f"expected 'clips' or 'events', got {v!r}"


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    path = resolve(base_dir, params["path"])
    items = (load_events if params.get("unit") == "events" else load_clips)(path)
    root = resolve(base_dir, params["media_root"]) if "media_root" in params else path.parent
    media = media_of_items(items, root)
    return DatasetLoad(items, media)


KIND = DatasetKind(
    "dream1k", __doc__.split("\n\n")[0],
    (Param("path", (str,), "DREAM-1k.jsonl", required=True, path="file"),
     Param("media_root", (str,), "folder of the videos (default: the jsonl's folder)", path="dir"),
     Param("unit", (str,), "'clips' (default) or 'events'", check=_unit)),
    load, reads_only=True,
)
