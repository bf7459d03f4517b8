"""Datasets a sweep can name: generated videos of moving shapes with CapQuiz-style items built from their ground
truth (`kind = "synthetic"`, the demo), or an ITEMS-schema file whose `media_path` are videos (`kind = "items"`).

A loaded dataset is its ITEMS table plus {video_id: path}; `digest` (items + video bytes) enters every cell key, so
changing a video or an item makes new cells instead of reusing stale results.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from engine.keys import content_key, derived_seed, file_digest
from engine.schemas import ITEMS, conform
from engine.sweep.config import DatasetSpec

DIRECTIONS = ("left", "right", "up", "down", "stays still")


@dataclass
class LoadedDataset:
    spec: DatasetSpec
    items: pa.Table  # ITEMS
    videos: dict[str, str]  # video_id -> path
    digest: str


def _options(answer: str, pool: list[str], item_id: str, n: int = 5) -> list[str]:
    """`answer` plus n-1 distractors drawn (deterministically per item) from `pool`."""
    others = sorted({p for p in pool if p != answer})
    random.Random(derived_seed("distractors", item_id)).shuffle(others)
    if len(others) < n - 1:
        raise ValueError(f"item {item_id}: need {n - 1} distractors, pool has {len(others)}")
    return [answer] + others[: n - 1]


def _direction(velocity: list[float], size: tuple[int, int]) -> str:
    vx, vy = velocity[0] / size[0], velocity[1] / size[1]
    if max(abs(vx), abs(vy)) < 0.05:
        return "stays still"
    if abs(vx) >= abs(vy):
        return "right" if vx > 0 else "left"
    return "down" if vy > 0 else "up"


def capquiz_items(video_id: str, path: str, truth: dict, size: tuple[int, int]) -> list[dict]:
    """Multiple-choice questions (5 options, answer = option text) whose answers are the video's ground truth."""
    from benchmarks.make_videos import BACKGROUNDS, COLORS, SHAPES

    shapes = truth["shapes"]
    present = sorted({f"a {s['color']} {s['shape']}" for s in shapes})
    absent = [f"a {c} {k}" for c in COLORS for k in SHAPES if f"a {c} {k}" not in present]
    first = shapes[0]
    n = truth["n_shapes"]
    questions = [
        ("scene", "What color is the background of the video?", truth["background"],
         list(BACKGROUNDS) + ["white", "black", "red"]),
        ("counting", "How many shapes are visible in the video?", str(n), [str(k) for k in range(1, 10)]),
        ("object", "Which of these objects appears in the video?", present[0], absent),
        ("action", f"In which direction does the {first['color']} {first['shape']} move at the start of the video?",
         _direction(first["velocity"], size), list(DIRECTIONS)),
    ]
    items = []
    for task, question, answer, pool in questions:
        item_id = f"{video_id}/{task}"
        items.append({
            "benchmark": "capquiz", "task": task, "item_id": item_id, "video_id": video_id, "media_path": path,
            "media_type": "video", "annotation": question, "options": _options(answer, pool, item_id),
            "answer": answer, "category": task, "extra": json.dumps({"source": "make_video ground truth"}),
        })
    return items


def synthetic_dataset(spec: DatasetSpec, root: Path) -> LoadedDataset:
    """Generate (once; reused when present) `n_videos` real H.264 videos and their CapQuiz-style items."""
    from benchmarks.make_videos import make_video

    size = (160, 120)
    out = root / "videos" / spec.name
    videos, rows = {}, []
    for i in range(spec.n_videos):
        video_id = f"{spec.name}-{i:03d}"
        path = out / f"{video_id}.mp4"
        sidecar = Path(f"{path}.json")
        if path.is_file() and sidecar.is_file():
            truth = json.loads(sidecar.read_text())
        else:
            truth = make_video(path, codec="h264", seconds=spec.duration_s, fps=12, size=size,
                               seed=spec.seed * 1000 + i)
        videos[video_id] = str(path)
        rows.extend(capquiz_items(video_id, str(path), truth, size))
    return _finish(spec, pa.Table.from_pylist(rows, schema=ITEMS), videos)


def items_dataset(spec: DatasetSpec, base: Path) -> LoadedDataset:
    """An ITEMS-schema Parquet or JSONL file; relative media paths resolve against the file's folder."""
    path = Path(spec.path)
    if not path.is_absolute():
        path = base / path
    if not path.is_file():
        raise FileNotFoundError(f"dataset {spec.name!r}: items file not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    else:
        import pyarrow.json as pj

        table = pj.read_json(path)
    table = conform(table, ITEMS)
    if spec.limit:
        keep = sorted(set(table.column("video_id").to_pylist()))[: spec.limit]
        import pyarrow.compute as pc

        table = table.filter(pc.is_in(table.column("video_id"), value_set=pa.array(keep)))
    videos = {}
    for vid, media in zip(table.column("video_id").to_pylist(), table.column("media_path").to_pylist()):
        if media is None:
            raise ValueError(f"dataset {spec.name!r} ({path}): item of video {vid!r} has no media_path")
        media_path = Path(media) if Path(media).is_absolute() else path.parent / media
        videos[vid] = str(media_path)
    return _finish(spec, table, videos)


def _finish(spec: DatasetSpec, items: pa.Table, videos: dict[str, str]) -> LoadedDataset:
    missing = [p for p in videos.values() if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"dataset {spec.name!r}: {len(missing)} videos not found, e.g. {missing[0]}")
    digests = {vid: file_digest(p) for vid, p in sorted(videos.items())}
    # media_path is left out: where the videos live does not change the results, their bytes do.
    digest = content_key("dataset", items.drop_columns(["media_path"]).to_pylist(), digests)
    return LoadedDataset(spec, items, videos, digest)


def load_dataset(spec: DatasetSpec, *, out_dir: Path, sweep_dir: Path) -> LoadedDataset:
    if spec.kind == "synthetic":
        return synthetic_dataset(spec, out_dir)
    return items_dataset(spec, sweep_dir)
