"""Shot cuts of a video (PySceneDetect) and the per-video scene boundaries that items carry.

Long-video benchmarks build their ground truth from shots (segments of typically 5 to 10 seconds, with the original
timestamps kept), so segmental captioning and construction need the same cuts. `detect_shots` runs
PySceneDetect's content detector through its PyAV backend (the decoder capeval already uses; no OpenCV video I/O)
and returns the shots in seconds from the start of the video.

The content detector scores each frame by the mean absolute change of its hue, saturation and value from the previous
frame (0-255 scale, the three channels weighted equally, edges not counted: PySceneDetect's defaults) and cuts where
the score reaches `threshold`. DEFAULT_THRESHOLD is PySceneDetect's own default (27): a hard cut between two
different shots scores far above it, motion inside a shot far below (a shape crossing a plain background scores
under 5 on the generated test videos). Fades and slow dissolves are not cuts for this detector: each frame differs
little from the last. `min_shot_s` keeps two cuts at least that far apart (PySceneDetect's `min_scene_len`, given in
frames there), so a flash does not split a shot.

`boundaries_from_extra` / `video_boundaries` read the boundaries an items file gives per video (the items a
construction pipeline writes carry them), so segmental captioning follows each video's own scenes: an item's
`extra.scene_boundaries` (the scene cuts, seconds, increasing) wins; without it `extra.shot_boundaries` (the detected
shot cuts) is used; a video with neither has none.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

DEFAULT_THRESHOLD = 27.0  # PySceneDetect ContentDetector's default (mean HSV change per pixel, 0-255)
DEFAULT_MIN_SHOT_S = 0.5  # PySceneDetect's default is 15 frames (0.5 s at 30 fps): given in seconds here
BOUNDARY_KEYS = ("scene_boundaries", "shot_boundaries")  # extra keys, in order of preference


class SceneDetectionError(RuntimeError):
    """A video PySceneDetect could not open or read; the message names the file."""


@dataclass(frozen=True)
class Shot:
    start: float  # seconds
    end: float


@dataclass(frozen=True)
class ShotList:
    shots: tuple[Shot, ...]
    duration: float  # seconds (end of the last frame)
    fps: float
    threshold: float
    min_shot_s: float

    @property
    def cuts(self) -> tuple[float, ...]:
        """The cut times (seconds): the start of every shot after the first."""
        return tuple(s.start for s in self.shots[1:])

    def as_dict(self) -> dict:
        return {"shots": [[s.start, s.end] for s in self.shots], "duration": self.duration, "fps": self.fps,
                "threshold": self.threshold, "min_shot_s": self.min_shot_s}

    @classmethod
    def from_dict(cls, d: dict) -> "ShotList":
        return cls(tuple(Shot(float(a), float(b)) for a, b in d["shots"]), float(d["duration"]), float(d["fps"]),
                   float(d["threshold"]), float(d["min_shot_s"]))


def _seconds(timecode) -> float:
    # FrameTimecode: `seconds` (0.7+) replaced get_seconds() (0.6, deprecated in 0.7)
    value = getattr(type(timecode), "seconds", None)
    return float(timecode.seconds if value is not None else timecode.get_seconds())


def detect_shots(path: str | Path, *, threshold: float = DEFAULT_THRESHOLD,
                 min_shot_s: float = DEFAULT_MIN_SHOT_S) -> ShotList:
    """The shots of the video at `path` (at least one: the whole video when there is no cut)."""
    import scenedetect
    from scenedetect import ContentDetector, SceneManager

    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold > 0):
        raise ValueError(f"scene detection: threshold must be a positive number, got {threshold!r}")
    if not (isinstance(min_shot_s, (int, float)) and math.isfinite(min_shot_s) and min_shot_s >= 0):
        raise ValueError(f"scene detection: min_shot_s must be a number >= 0, got {min_shot_s!r}")
    path = Path(path)
    if not path.is_file():
        raise SceneDetectionError(f"scene detection: video not found: {path}")
    try:
        video = scenedetect.open_video(str(path), backend="pyav")
        fps = float(video.frame_rate)
        manager = SceneManager()
        manager.add_detector(ContentDetector(threshold=float(threshold),
                                             min_scene_len=max(1, int(round(min_shot_s * fps)))))
        manager.detect_scenes(video=video)
        scenes = manager.get_scene_list(start_in_scene=True)
    except Exception as exc:  # noqa: BLE001 - VideoOpenFailure, decoder errors: one clear error naming the file
        raise SceneDetectionError(f"scene detection failed for {path}: {type(exc).__name__}: {exc}") from exc
    if not scenes:
        raise SceneDetectionError(f"scene detection: no frames could be read from {path}")
    shots = tuple(Shot(round(_seconds(a), 6), round(_seconds(b), 6)) for a, b in scenes)
    return ShotList(shots, shots[-1].end, fps, float(threshold), float(min_shot_s))


# -- boundaries carried by items --------------------------------------------------------------------------------------
def check_boundaries(value, where: str) -> tuple[float, ...]:
    """A boundary list as floats: positive, finite, strictly increasing; anything else is a ValueError naming
    `where`."""
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in value):
        raise ValueError(f"{where}: expected a list of numbers (seconds), got {value!r}"[:300])
    out = tuple(float(b) for b in value)
    if any(b <= 0 for b in out) or any(b >= c for b, c in zip(out, out[1:])):
        raise ValueError(f"{where}: boundaries must be positive and increasing, got {list(out)}"[:300])
    return out


def boundaries_from_extra(extra: dict, where: str = "extra") -> tuple[float, ...]:
    """The boundaries an item's extra gives: scene_boundaries, else shot_boundaries, else ()."""
    for key in BOUNDARY_KEYS:
        if extra.get(key) is not None:
            return check_boundaries(extra[key], f"{where}.{key}")
    return ()


def video_boundaries(items) -> dict[str, tuple[float, ...]]:
    """{video_id: boundaries} of the videos whose items give some (an ITEMS table); two items of one video that give
    different boundaries are an error naming the video."""
    if items is None or "extra" not in items.column_names or items.num_rows == 0:
        return {}
    out: dict[str, tuple[float, ...]] = {}
    for vid, item_id, text in zip(items.column("video_id").to_pylist(), items.column("item_id").to_pylist(),
                                  items.column("extra").to_pylist()):
        if not text or not any(k in text for k in BOUNDARY_KEYS):  # cheap skip: most items carry none
            continue
        try:
            extra = json.loads(text)
        except json.JSONDecodeError:
            continue  # not JSON: the protocols say so where they read extra; no boundaries here
        if not isinstance(extra, dict):
            continue
        found = boundaries_from_extra(extra, f"item {item_id!r} extra")
        if not found:
            continue
        if vid in out and out[vid] != found:
            raise ValueError(f"video {vid!r}: its items give different scene boundaries ({list(out[vid])} and "
                             f"{list(found)})")
        out[vid] = found
    return out
