"""`synthetic`: generated H.264 videos of moving shapes with CapQuiz-style multiple-choice items built from their
ground truth (background colour, shape count, objects, motion): the demo's dataset, no download needed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa

from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, positive_int, positive_number
from capeval.engine.keys import derived_seed
from capeval.engine.schemas import ITEMS

DIRECTIONS = ("left", "right", "up", "down", "stays still")
SIZE = (160, 120)


def _options(answer: str, pool: list[str], item_id: str, position: int, n: int = 5) -> list[str]:
    """`answer` at `position` among n-1 distractors drawn (deterministically per item) from `pool`."""
    others = sorted({p for p in pool if p != answer})
    random.Random(derived_seed("distractors", item_id)).shuffle(others)
    if len(others) < n - 1:
        raise ValueError(f"item {item_id}: need {n - 1} distractors, pool has {len(others)}")
    options = others[: n - 1]
    options.insert(position, answer)
    return options


def answer_position(item_number: int, seed: int, n: int = 5) -> int:
    """Where the correct option goes for the dataset's `item_number`-th item: a seeded permutation of the n positions,
    repeated, so every run of n consecutive items uses each position once. (With the answer always first, a judge
    that always says "A" scored CapP = CapR = 100.)"""
    order = list(range(n))
    random.Random(derived_seed("answer-positions", seed)).shuffle(order)
    return order[item_number % n]


def _direction(velocity: list[float], size: tuple[int, int]) -> str:
    vx, vy = velocity[0] / size[0], velocity[1] / size[1]
    if max(abs(vx), abs(vy)) < 0.05:
        return "stays still"
    if abs(vx) >= abs(vy):
        return "right" if vx > 0 else "left"
    return "down" if vy > 0 else "up"


#: the demo's question kinds under the CapQuiz paper's type names, so they land in its Descriptive group
PAPER_TYPE = {"scene": "Setting", "counting": "Attribute", "object": "Entity", "action": "Action"}


def capquiz_items(video_id: str, path: str, truth: dict, size: tuple[int, int], *, video_number: int = 0,
                  seed: int = 0) -> list[dict]:
    """Multiple-choice questions (5 options, answer = option text) whose answers are the video's ground truth; the
    answer's position follows answer_position over the dataset's items (video_number: the video's place in it)."""
    from capeval.engine.datasets.synthetic_videos import BACKGROUNDS, COLORS, SHAPES  # deferred: PyAV, NumPy

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
    for q, (task, question, answer, pool) in enumerate(questions):
        item_id = f"{video_id}/{task}"
        position = answer_position(video_number * len(questions) + q, seed)
        items.append({
            "benchmark": "capquiz", "task": task, "item_id": item_id, "video_id": video_id, "media_path": path,
            "media_type": "video", "annotation": question, "options": _options(answer, pool, item_id, position),
            "answer": answer, "category": PAPER_TYPE[task],  # CapQuiz's own question-type names (issue 7)
            "extra": json.dumps({"source": "make_video ground truth"}),
        })
    return items


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    """Generate (once; reused when present) `n_videos` real H.264 videos under out_dir/videos/<name>."""
    from capeval.engine.datasets.synthetic_videos import make_video  # deferred: PyAV, NumPy

    n_videos, seed, duration = params.get("n_videos", 6), params.get("seed", 0), params.get("duration_s", 2.0)
    out = out_dir / "videos" / name
    videos, rows = {}, []
    for i in range(n_videos):
        video_id = f"{name}-{i:03d}"
        path = out / f"{video_id}.mp4"
        sidecar = Path(f"{path}.json")
        if path.is_file() and sidecar.is_file():
            truth = json.loads(sidecar.read_text())
        else:
            truth = make_video(path, codec="h264", seconds=duration, fps=12, size=SIZE, seed=seed * 1000 + i)
        videos[video_id] = str(path)
        rows.extend(capquiz_items(video_id, str(path), truth, SIZE, video_number=i, seed=seed))
    return DatasetLoad(pa.Table.from_pylist(rows, schema=ITEMS), videos)


KIND = DatasetKind(
    "synthetic", __doc__.split("\n\n")[0],
    (Param("n_videos", (int,), "number of videos to generate (default 6)", check=positive_int),
     Param("seed", (int,), "generator seed (default 0)"),
     Param("duration_s", (int, float), "seconds per video (default 2.0)", check=positive_number)),
    load,
)
