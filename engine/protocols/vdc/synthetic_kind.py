"""`vdc_synthetic`: generated H.264 videos of moving shapes with VDC-style QA pairs for each of the five caption
kinds (short, detailed, background, main_object, camera), built from the videos' ground truth: a VDC sweep end to
end with no download.

The items have the `vdc` kind's shape (task = the kind, item_id = "<kind>/<video_id>/<n:02d>", annotation =
question, answer = reference answer, category = what the question asks about, extra = {"qa_index",
"n_questions", "source"}); the answers are short phrases as in VDC's question sets ("gray", "a red circle",
"left"). Videos are written once under <out>/videos/<name> with their ground-truth sidecar and reused while it
matches the params."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, positive_int, positive_number
from capeval.engine.schemas import ITEMS, conform

from .release import BENCHMARK, KINDS, kinds_problem

SIZE = (160, 120)
FPS = 12
NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _number(n: int) -> str:
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _plural(shape: str) -> str:
    return f"{shape}s"


def direction(velocity: list[float], size: tuple[int, int]) -> str:
    """Where a shape heads at the start: left, right, up, down, or "nowhere" when it barely moves (under 5% of the
    frame per second)."""
    vx, vy = velocity[0] / size[0], velocity[1] / size[1]
    if max(abs(vx), abs(vy)) < 0.05:
        return "nowhere"
    if abs(vx) >= abs(vy):
        return "right" if vx > 0 else "left"
    return "down" if vy > 0 else "up"


def _motion(velocity: list[float], size: tuple[int, int]) -> str:
    way = direction(velocity, size)
    return "it stays still" if way == "nowhere" else f"it moves {way}"


def questions_by_kind(truth: dict, size: tuple[int, int]) -> dict[str, list[tuple[str, str, str]]]:
    """(question, answer, category) lists of one video for each kind, from make_video's ground truth."""
    shapes = truth["shapes"]
    background = truth["background"]
    n = truth["n_shapes"]
    kinds_of_shape = sorted({s["shape"] for s in shapes})
    colors = sorted({s["color"] for s in shapes})
    main = shapes[0]
    main_name = f"{main['color']} {main['shape']}"
    detailed = [
        ("How many objects are in the video", _number(n), "count"),
        ("What colors do the objects have", _listed(colors), "attribute"),
        ("What kinds of shapes are shown", _listed([_plural(k) for k in kinds_of_shape]), "object"),
    ]
    described = set()
    for s in shapes:  # one question per distinct coloured shape (two red circles would make the question ambiguous)
        name = f"{s['color']} {s['shape']}"
        if name in described or truth["counts"].get(name, 0) > 1:
            continue
        described.add(name)
        detailed.append((f"In which direction does the {name} move at the start", direction(s["velocity"], size),
                         "action"))
    return {
        "short": [
            ("What does the video show", f"{_number(n)} moving shapes on a {background} background", "object"),
            ("How many objects are in the video", _number(n), "count"),
            ("What color is the background", background, "environment"),
        ],
        "detailed": detailed,
        "background": [
            ("What color is the background", background, "environment"),
            ("What kind of background is behind the objects", f"a plain {background} background", "environment"),
            ("Does anything in the background move", "no, the background stays still", "action"),
        ],
        "main_object": [
            ("What is the main object", f"a {main_name}", "object"),
            ("What shape is the main object", main["shape"], "object"),
            ("What color is the main object", main["color"], "attribute"),
            ("What does the main object do", _motion(main["velocity"], size), "action"),
        ],
        "camera": [
            ("Does the camera move", "no, the camera is static", "camera"),
            ("How many shots does the video have", "one continuous shot", "camera"),
            ("From which viewpoint is the scene filmed", "a fixed front view of a flat scene", "camera"),
        ],
    }


def vdc_items(video_id: str, path: str, truth: dict, size: tuple[int, int],
              kinds: tuple[str, ...] | list[str] = KINDS) -> list[dict]:
    """ITEMS rows (dicts) of one video for `kinds`, in KINDS order."""
    rows = []
    for kind, pairs in questions_by_kind(truth, size).items():
        if kind not in kinds:
            continue
        for n, (question, answer, category) in enumerate(pairs):
            rows.append({
                "benchmark": BENCHMARK, "task": kind, "item_id": f"{kind}/{video_id}/{n:02d}", "video_id": video_id,
                "media_path": path, "media_type": "video", "annotation": question, "answer": answer,
                "category": category,
                "extra": json.dumps({"qa_index": n, "n_questions": len(pairs), "source": "make_video ground truth"}),
            })
    return rows


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    """Generate (once; reused while the sidecar matches seed and length) `n_videos` real H.264 videos under
    out_dir/videos/<name>."""
    from capeval.engine.datasets.synthetic_videos import reuse_or_make_video  # deferred: PyAV, NumPy

    n_videos, seed, duration = params.get("n_videos", 6), params.get("seed", 0), params.get("duration_s", 2.0)
    kinds = tuple(params.get("kinds") or KINDS)
    out = out_dir / "videos" / name
    videos, rows = {}, []
    for i in range(n_videos):
        video_id = f"{name}-{i:03d}"
        path = out / f"{video_id}.mp4"
        truth = reuse_or_make_video(path, seconds=duration, fps=FPS, size=SIZE, seed=seed * 1000 + i)
        videos[video_id] = str(path)
        rows.extend(vdc_items(video_id, str(path), truth, SIZE, kinds))
    return DatasetLoad(conform(pa.Table.from_pylist(rows, schema=ITEMS), ITEMS), videos)


KIND = DatasetKind(
    "vdc_synthetic", __doc__.split("\n\n")[0],
    (Param("n_videos", (int,), "number of videos to generate (default 6)", check=positive_int),
     Param("seed", (int,), "generator seed (default 0)"),
     Param("duration_s", (int, float), "seconds per video (default 2.0)", check=positive_number),
     Param("kinds", (list,), f"the kinds to ask about (default all five: {', '.join(KINDS)})", check=kinds_problem)),
    load,
)
