"""`dream1k_synthetic`: generated H.264 videos of moving shapes with a DREAM-1K-style reference description and
event list per clip, built from the videos' ground truth: a DREAM-1K sweep end to end with no download.

The items have the `dream1k` kind's shape (one row per clip: benchmark "dream1k", task "events", item_id =
video_id, annotation = the reference events as a JSON list, answer = the reference description, category = the
clip's source, extra = {duration, dataset, idx, n_events, n_shots, n_subjects}). The events are what happens, in
time order: each shape's start ("the red circle moves to the left", "the blue square stays still"), then each
bounce off a frame edge ("the red circle bounces off the left edge"). The source is "DREAM/synthetic_<background>"
(several sources, so that the per-source averaging is exercised); every clip is one shot, its subjects are its
shapes. Videos are written once under <out>/videos/<name> with their ground-truth sidecar and reused while it
matches the params."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa

from capeval.engine.datasets.registry import DatasetKind, DatasetLoad, Param, positive_int, positive_number
from capeval.engine.schemas import ITEMS, conform

BENCHMARK = "dream1k"
TASK = "events"
SIZE = (160, 120)
FPS = 12
STILL = 0.05  # under 5% of the frame per second on both axes: the shape stays still
WAYS = {"left": "to the left", "right": "to the right", "up": "up", "down": "down"}
EDGES = {(0, 0): "left edge", (0, 1): "right edge", (1, 0): "top edge", (1, 1): "bottom edge"}  # (axis, wall)


def direction(velocity: list[float], size: tuple[int, int]) -> str | None:
    """Where a shape heads at the start (left, right, up, down), or None when it barely moves."""
    vx, vy = velocity[0] / size[0], velocity[1] / size[1]
    if max(abs(vx), abs(vy)) < STILL:
        return None
    if abs(vx) >= abs(vy):
        return "right" if vx > 0 else "left"
    return "down" if vy > 0 else "up"


def bounces(shape: dict, size: tuple[int, int], seconds: float) -> list[tuple[float, str]]:
    """(time, edge) of each bounce off a frame edge within the clip, as synthetic_videos draws the motion (the
    position reflects at 0 and at frame - side on each axis)."""
    out = []
    for axis in (0, 1):
        span = size[axis] - shape["size_px"]
        p0, v = shape["start"][axis], shape["velocity"][axis]
        if span <= 0 or abs(v) / size[axis] < STILL:
            continue
        # the unfolded position p0 + v t meets a wall at every multiple k of the span: even k the near wall (0),
        # odd k the far one
        k = math.floor(p0 / span) + 1 if v > 0 else math.ceil(p0 / span) - 1
        while True:
            t = (k * span - p0) / v
            if t >= seconds:
                break
            if t > 0:
                out.append((t, EDGES[(axis, k % 2)]))
            k += 1 if v > 0 else -1
    return sorted(out)


def _names(shapes: list[dict]) -> list[str]:
    """"red circle", or "first red circle" / "second red circle" when two shapes look the same."""
    counts: dict[str, int] = {}
    for s in shapes:
        counts[f"{s['color']} {s['shape']}"] = counts.get(f"{s['color']} {s['shape']}", 0) + 1
    seen: dict[str, int] = {}
    ordinals = ("first", "second", "third", "fourth", "fifth", "sixth")
    names = []
    for s in shapes:
        name = f"{s['color']} {s['shape']}"
        if counts[name] > 1:
            seen[name] = seen.get(name, 0) + 1
            name = f"{ordinals[seen[name] - 1]} {name}"
        names.append(name)
    return names


def clip_events(truth: dict, size: tuple[int, int], seconds: float) -> list[str]:
    """The clip's reference events in time order (module doc)."""
    names = _names(truth["shapes"])
    timed = []
    for i, (shape, name) in enumerate(zip(truth["shapes"], names)):
        way = direction(shape["velocity"], size)
        timed.append((0.0, i, f"The {name} {'stays still' if way is None else 'moves ' + WAYS[way]}."))
        timed += [(t, i, f"The {name} bounces off the {edge}.") for t, edge in bounces(shape, size, seconds)]
    return [text for _, _, text in sorted(timed)]


def description(truth: dict, events: list[str]) -> str:
    """The reference description: the scene, then the events as a narrative."""
    names = [f"{'an' if n[0] in 'aeiou' else 'a'} {n}" for n in _names(truth["shapes"])]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    lead = f"On a plain {truth['background']} background there are {listed}."
    return " ".join([lead, *events])


def clip_item(video_id: str, path: str, truth: dict, size: tuple[int, int], number: int) -> dict:
    seconds = float(truth.get("duration_s") or 0.0)
    # what is seen happens up to the last frame
    events = clip_events(truth, size, (truth["n_frames"] - 1) / truth["fps"])
    source = f"DREAM/synthetic_{truth['background'].replace(' ', '_')}"
    extra = {"duration": seconds, "dataset": source, "idx": f"{source}_{number}", "n_events": len(events),
             "n_shots": 1, "n_subjects": truth["n_shapes"], "source": "make_video ground truth"}
    return {"benchmark": BENCHMARK, "task": TASK, "item_id": video_id, "video_id": video_id, "media_path": path,
            "media_type": "video", "annotation": json.dumps(events), "answer": description(truth, events),
            "category": source, "extra": json.dumps(extra)}


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    """Generate (once; reused while the sidecar matches seed and length) `n_videos` real H.264 videos under
    out_dir/videos/<name>."""
    from capeval.engine.datasets.synthetic_videos import reuse_or_make_video  # deferred: PyAV, NumPy

    n_videos, seed, duration = params.get("n_videos", 6), params.get("seed", 0), params.get("duration_s", 2.0)
    out = out_dir / "videos" / name
    videos, rows = {}, []
    for i in range(n_videos):
        video_id = f"{name}-{i:03d}"
        path = out / f"{video_id}.mp4"
        truth = reuse_or_make_video(path, seconds=duration, fps=FPS, size=SIZE, seed=seed * 1000 + i)
        videos[video_id] = str(path)
        rows.append(clip_item(video_id, str(path), truth, SIZE, i))
    return DatasetLoad(conform(pa.Table.from_pylist(rows, schema=ITEMS), ITEMS), videos)


KIND = DatasetKind(
    "dream1k_synthetic", __doc__.split("\n\n")[0],
    (Param("n_videos", (int,), "number of videos to generate (default 6)", check=positive_int),
     Param("seed", (int,), "generator seed (default 0)"),
     Param("duration_s", (int, float), "seconds per video (default 2.0)", check=positive_number)),
    load,
)
