"""A sweep's datasets: each `[[datasets]]` table is loaded by its kind (engine/datasets/registry.py: items,
videos, and the kinds benchmark packages bring, `capeval list kinds`) into ITEMS +
{video_id: media path}.

`digest` (items + media bytes) enters every cell key, so changing a video or an item makes new cells instead of
reusing stale results. Media are required only for what the sweep captions: a dataset whose captions all come from
`[[captions]]` files needs no media files at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pyarrow as pa

from capeval.engine.datasets.media import filter_limit
from capeval.engine.datasets.registry import load
from capeval.engine.errors import UsageError
from capeval.engine.frames.scenes import video_boundaries
from capeval.engine.keys import dataset_table_key, file_digest
from capeval.engine.registry import lookup
from capeval.engine.sweep.config import DatasetSpec
from capeval.engine.sweep.pairs import plan_pairs, read_view


@dataclass
class LoadedDataset:
    spec: DatasetSpec
    items: pa.Table  # ITEMS
    videos: dict[str, str]  # video_id -> path of the video or image
    digest: str

    @cached_property
    def media_types(self) -> dict[str, str]:
        """video_id -> "image" | "video" (the caption prompt is chosen per media type)."""
        return dict(zip(self.items.column("video_id").to_pylist(),
                        (m or "video" for m in self.items.column("media_type").to_pylist())))

    def record(self, sweep_dir: Path) -> dict:
        """What run.json says of this dataset as read (provenance): its kind and parameters as given, the path it
        was read from (absolute) with the SHA-256 of that file when it is one, the content digest that enters every
        cell key (items and media bytes), and the counts of items and videos loaded (after `limit`)."""
        params = self.spec.kind_params()
        path = params.get("path")
        where = None if path is None else (Path(sweep_dir) / str(path)).resolve()
        return {"name": self.spec.name, "kind": self.spec.kind, "params": params,
                "path": None if where is None else str(where),
                "file_digest": _file_digest(where),
                "digest": self.digest, "limit": self.spec.limit, "n_items": self.items.num_rows,
                "n_videos": len(set(self.items.column("video_id").to_pylist())),
                "n_media_files": len(self.videos)}

    @cached_property
    def scene_boundaries(self) -> dict[str, tuple[float, ...]]:
        """video_id -> scene cuts (seconds) its items give (extra.scene_boundaries / shot_boundaries): segmental
        prompts caption those videos scene by scene (engine/frames/scenes.py)."""
        try:
            return video_boundaries(self.items)
        except ValueError as exc:
            raise UsageError(f"dataset {self.spec.name!r}: {exc}") from None


def _file_digest(path: Path | None) -> str | None:
    """SHA-256 of the file at `path` (capeval.engine.keys.file_digest), None for a folder, a glob or a file gone since."""
    try:
        return file_digest(path) if path is not None and path.is_file() else None
    except OSError:
        return None


def dataset_records(datasets: dict[str, LoadedDataset], sweep_dir: Path) -> dict[str, dict]:
    """run.json's `datasets`: each dataset as read (LoadedDataset.record)."""
    return {name: d.record(sweep_dir) for name, d in datasets.items()}


def load_dataset(spec: DatasetSpec, *, out_dir: Path, sweep_dir: Path, require_media: bool = True,
                 digest: bool = True) -> LoadedDataset:
    """The dataset's items (after `limit`) and media paths, loaded by its kind. `require_media`: every item's media
    must exist (what a sweep captions or shows its judge). `digest=False` (`capeval plan`, which never reads media)
    leaves the content digest empty instead of reading every media file."""
    view = read_view(spec, sweep_dir)  # a kind that only reads files: the table the sweep's checks read already
    if view is not None:
        items, media = view.items, view.media
    else:
        loaded = load(spec.kind, spec.kind_params(), base_dir=sweep_dir, out_dir=out_dir, name=spec.name)
        items, media = filter_limit(loaded.items, spec.limit), loaded.media
    keep = set(items.column("video_id").to_pylist())
    videos = {v: p for v, p in media.items() if v in keep}
    if require_media:
        without = sorted(keep - set(videos))
        if without:
            raise UsageError(f"dataset {spec.name!r}: {len(without)} videos have no media path (e.g. "
                             f"{without[0]!r}); give media_path, or take their captions from [[captions]]")
        missing = [p for p in videos.values() if not Path(p).is_file()]
        if missing:
            raise UsageError(f"dataset {spec.name!r}: {len(missing)} of {len(videos)} media files not found, e.g. "
                             f"{missing[0]}")
    return LoadedDataset(spec, items, videos, _content_digest(items, videos) if digest else "")


def _content_digest(items: pa.Table, videos: dict[str, str]) -> str:
    digests = {vid: (file_digest(p) if Path(p).is_file() else None) for vid, p in sorted(videos.items())}
    # media_path is left out: where the videos live does not change the results, their bytes do.
    return dataset_table_key(items.drop_columns(["media_path"]), digests)


def judge_sees_frames(protocol: str) -> bool:
    """Whether protocol `protocol`'s judge looks at the media itself (it declares `judge_frames`), so its datasets
    need media files even when every caption comes from a file."""
    return lookup("protocol", protocol).judge_frames is not None


def media_required(config, spec: DatasetSpec) -> bool:
    """Whether `spec`'s media files must exist for `config`: some captioner captions it, or a protocol that judges
    it (engine/sweep/pairs.py) shows frames to its judge. A dataset judged only from `[[captions]]` files by
    text-only protocols needs no media."""
    if config.captioners:
        return True
    plan = plan_pairs(config, checked=config.pairs)
    return any(plan.judges(i, spec.name) and judge_sees_frames(p.name) for i, p in enumerate(config.protocols))
