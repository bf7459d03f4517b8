"""Frame sampling specs: which timestamps to take from a video of a given duration.

Each spec is a small frozen dataclass with a canonical text form (`str(spec)`), used in content keys and in
the `frame_spec` column, and parsed back by `FrameSpec.parse`:

    uniform:32                     32 frames at the centres of 32 equal segments (papers use 8-128)
    fps:0.4                        one frame every 1/0.4 s, at interval centres (long-video papers' 0.4 fps)
    fps:1,max=64                   ... capped: beyond 64 frames, 64 uniform frames instead
    segments:length=60,per=4       60 s segments, 4 uniform frames in each (long videos)
    segments:at=12.5|40,per=2      segments split at given boundaries (e.g. scene cuts), 2 frames in each
    linspace:32                    32 frames at np.linspace(0, N-1, 32) frame indices, truncated to int: the first
                                   and last frames included (an official decord sampling; lmms-eval's rule)
    interior:32                    32 frames at int(i * N / 33), i = 1..32: the interior points of 33 equal steps,
                                   never the first frame (VLMEvalKit's video datasets)
    vllm:32                        vLLM's own video sampler for num_frames=32: every frame when the video has at
                                   most 32, else np.linspace(0, N-1, 32) truncated to int
    vllm:32,fps=2                  ... and fps=2: at most floor(duration * 2) frames (vLLM takes the smaller count)
    uniform:32,snap=key            any spec + snap=key: take the keyframe nearest each target when one lies
                                   within half the gap to the neighbouring targets (decodes ~1 frame each)

Segment centres are used by uniform, fps and segments (never t=0 or t=duration): the first and last frames are
often black or a fade, and a centre is always strictly inside the decodable range. `linspace` exists because an
official protocol samples endpoints; it needs the frame rate (`timestamps(duration, rate)`). `interior` and `vllm`
reproduce another tool's frames on purpose (docs/frames.md, "Matching another tool's frames"); like `linspace` they
pick frame indices, so they need the rate too. On a short clip `linspace` and `interior` repeat frames (more frames
asked than the video has: lmms-eval#780); `vllm` gives each frame once instead, so fewer frames than asked.

An image is one frame: every spec gives it once (capeval.engine.frames.decode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


class FrameSpecError(ValueError):
    """A frame spec that cannot be parsed or is out of range."""


@dataclass(frozen=True)
class FrameSpec:
    """A frame sampling spec: one of the kinds below. Its canonical text (`str(spec)`) is its identity in content
    keys and in the `frame_spec` columns; `FrameSpec.parse` makes the value from text once, where text enters (the
    sweep file, a command's arguments, a stored column read back), and the frames stage takes the value."""

    @staticmethod
    def parse(text: str) -> "FrameSpec":
        """The spec of `text` (its canonical form or a looser spelling: case, spaces); errors say what was
        expected."""
        if not isinstance(text, str):
            raise FrameSpecError(f"frame spec must be text like 'uniform:32', got {type(text).__name__}")
        base, comma, last = text.strip().rpartition(",")
        if comma and last.strip().lower().replace(" ", "") == "snap=key":
            return KeyframeSnap(FrameSpec.parse(base))
        kind, sep, rest = text.strip().partition(":")
        kind = kind.strip().lower()
        if not sep or not rest.strip():
            raise FrameSpecError(f"frame spec {text!r}: expected KIND:ARGS, e.g. uniform:32, fps:0.4,max=64, "
                                 f"segments:length=60,per=4")
        args = [a.strip() for a in rest.split(",")]
        try:
            if kind == "uniform":
                if len(args) != 1:
                    raise FrameSpecError(f"frame spec {text!r}: uniform takes one count, e.g. uniform:32")
                return Uniform(_int(args[0], text))
            if kind == "linspace":
                if len(args) != 1:
                    raise FrameSpecError(f"frame spec {text!r}: linspace takes one count, e.g. linspace:32")
                return Linspace(_int(args[0], text))
            if kind == "interior":
                if len(args) != 1:
                    raise FrameSpecError(f"frame spec {text!r}: interior takes one count, e.g. interior:8")
                return Interior(_int(args[0], text))
            if kind == "vllm":
                opts = _options(args[1:], text, allowed={"fps"})
                return VLLMSampler(_int(args[0], text), _float(opts["fps"], text) if "fps" in opts else None)
            if kind == "fps":
                opts = _options(args[1:], text, allowed={"max"})
                return FPS(_float(args[0], text), _int(opts["max"], text) if "max" in opts else None)
            if kind == "segments":
                opts = _options(args, text, allowed={"length", "at", "per"})
                if "per" not in opts:
                    raise FrameSpecError(f"frame spec {text!r}: segments needs per=N")
                at = opts.get("at")
                return Segments(
                    per_segment=_int(opts["per"], text),
                    length_s=_float(opts["length"], text) if "length" in opts else None,
                    boundaries=tuple(_float(x, text) for x in at.split("|")) if at is not None else None,
                )
        except FrameSpecError as exc:
            if text in str(exc):
                raise
            raise FrameSpecError(f"frame spec {text!r}: {exc}") from None
        raise FrameSpecError(f"frame spec {text!r}: unknown kind {kind!r} (use uniform, linspace, interior, vllm, fps or "
                              f"segments)")

    def timestamps(self, duration: float, rate: float | None = None) -> np.ndarray:
        """Target seconds for a video of `duration` s at `rate` frames/s (only linspace needs the rate)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Uniform(FrameSpec):
    n: int

    def __post_init__(self):
        if not isinstance(self.n, int) or self.n < 1:
            raise FrameSpecError(f"uniform: n must be a positive integer, got {self.n!r}")

    def __str__(self) -> str:
        return f"uniform:{self.n}"

    def timestamps(self, duration: float, rate: float | None = None) -> np.ndarray:
        return _centres(0.0, _check_duration(duration), self.n)


@dataclass(frozen=True)
class FPS(FrameSpec):
    fps: float
    max_frames: int | None = None

    def __post_init__(self):
        if not (isinstance(self.fps, (int, float)) and math.isfinite(self.fps) and self.fps > 0):
            raise FrameSpecError(f"fps: rate must be a positive number, got {self.fps!r}")
        if self.max_frames is not None and (not isinstance(self.max_frames, int) or self.max_frames < 1):
            raise FrameSpecError(f"fps: max must be a positive integer, got {self.max_frames!r}")

    def __str__(self) -> str:
        base = f"fps:{_num(self.fps)}"
        return base if self.max_frames is None else f"{base},max={self.max_frames}"

    def timestamps(self, duration: float, rate: float | None = None) -> np.ndarray:
        duration = _check_duration(duration)
        n = max(1, int(math.floor(duration * self.fps + 1e-9)))
        if self.max_frames is not None and n > self.max_frames:
            return _centres(0.0, duration, self.max_frames)
        return (np.arange(n) + 0.5) / self.fps


@dataclass(frozen=True)
class Segments(FrameSpec):
    """Uniform frames per segment; segments of `length_s` seconds, or split at `boundaries` (seconds)."""

    per_segment: int
    length_s: float | None = None
    boundaries: tuple[float, ...] | None = None

    def __post_init__(self):
        if not isinstance(self.per_segment, int) or self.per_segment < 1:
            raise FrameSpecError(f"segments: per must be a positive integer, got {self.per_segment!r}")
        if (self.length_s is None) == (self.boundaries is None):
            raise FrameSpecError("segments: give exactly one of length=SECONDS or at=T1|T2|...")
        if self.length_s is not None and not (self.length_s > 0 and math.isfinite(self.length_s)):
            raise FrameSpecError(f"segments: length must be a positive number, got {self.length_s!r}")
        if self.boundaries is not None:
            b = tuple(float(x) for x in self.boundaries)
            if any(x <= 0 for x in b) or list(b) != sorted(set(b)):
                raise FrameSpecError(f"segments: boundaries must be positive and increasing, got {b}")
            object.__setattr__(self, "boundaries", b)

    def __str__(self) -> str:
        if self.length_s is not None:
            return f"segments:length={_num(self.length_s)},per={self.per_segment}"
        return f"segments:at={'|'.join(_num(b) for b in self.boundaries)},per={self.per_segment}"

    def edges(self, duration: float) -> list[float]:
        duration = _check_duration(duration)
        if self.length_s is not None:
            n = max(1, int(math.ceil(duration / self.length_s - 1e-9)))
            return [min(i * self.length_s, duration) for i in range(n)] + [duration]
        return [0.0] + [b for b in self.boundaries if b < duration] + [duration]

    def timestamps(self, duration: float, rate: float | None = None) -> np.ndarray:
        e = self.edges(duration)
        return np.concatenate([_centres(a, b, self.per_segment) for a, b in zip(e[:-1], e[1:])])


@dataclass(frozen=True)
class Linspace(FrameSpec):
    """Frame indices np.linspace(0, N-1, k) truncated to int (decord-style), N = frames in the video."""

    n: int

    def __post_init__(self):
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise FrameSpecError(f"linspace: k must be a positive integer, got {self.n!r}")

    def __str__(self) -> str:
        return f"linspace:{self.n}"

    def indices(self, n_frames: int) -> np.ndarray:
        return np.linspace(0, max(1, int(n_frames)) - 1, self.n, dtype=int)

    def timestamps(self, duration: float, rate: float | None = None) -> np.ndarray:
        duration = _check_duration(duration)
        if rate and rate > 0:
            # the display time of frame i is i / rate; the decoder returns the frame nearest each target
            return self.indices(int(round(duration * rate))) / float(rate)
        # no known rate: the same endpoints in seconds, the last kept just inside the stream
        return np.minimum(np.linspace(0.0, duration, self.n), duration * (1 - 1e-6))


def _index_times(indices: np.ndarray, rate: float) -> np.ndarray:
    """The display times of frame `indices` at `rate` frames/s (the decoder returns the frame nearest each)."""
    return np.asarray(indices, np.float64) / float(rate)


def _frame_total(duration: float, rate: float) -> int:
    """Frames in a constant-rate video of `duration` s at `rate` frames/s (what decord's len() or OpenCV's
    CAP_PROP_FRAME_COUNT give for it)."""
    return max(1, int(round(duration * rate)))


@dataclass(frozen=True)
class Interior(FrameSpec):
    """VLMEvalKit's k frames: indices int(i * N / (k + 1)) for i = 1..k, N = frames in the video.

    The rule of `VideoBaseDataset.save_video_frames` without fps (`step_size = len(vid) / (num_frames + 1)`),
    open-compass/VLMEvalKit@0a7916913ba45138b73b2438498a7fceaba51eee:vlmeval/dataset/video_base.py:97-98. Never the
    first frame, nor the last (i * N / (k + 1) < N). A clip with fewer than k + 1 frames repeats frames."""

    n: int

    def __post_init__(self):
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise FrameSpecError(f"interior: k must be a positive integer, got {self.n!r}")

    def __str__(self) -> str:
        return f"interior:{self.n}"

    def indices(self, n_frames: int) -> np.ndarray:
        step = max(1, int(n_frames)) / (self.n + 1)
        return np.array([int(i * step) for i in range(1, self.n + 1)], dtype=int)

    def timestamps(self, duration: float, rate: float | None = None) -> np.ndarray:
        duration = _check_duration(duration)
        if rate and rate > 0:
            return _index_times(self.indices(_frame_total(duration, rate)), rate)
        return np.arange(1, self.n + 1) * (duration / (self.n + 1))


@dataclass(frozen=True)
class VLLMSampler(FrameSpec):
    """vLLM's own video sampler for `num_frames` = n (and `fps` when given): the frames vLLM picks when it is given
    the video file instead of frames.

    `VideoBackend.compute_frames_index_to_sample`, vllm-project/vllm@e5005d0743bd21533acc0184e0595a51ec3f1c52:
    vllm/multimodal/video.py:205-229 (the same rule in the older `OpenCVVideoBackend.load_bytes`): the count is
    min(n, N), then min(that, floor(duration * fps)) when fps > 0, at least 1; all N frames when the count is N, else
    np.linspace(0, N - 1, count, dtype=int). vLLM's duration is N / the container's rate. Unlike `linspace`, a clip
    shorter than n frames gives each of its frames once (no repeats), so fewer than n frames."""

    n: int
    fps: float | None = None

    def __post_init__(self):
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise FrameSpecError(f"vllm: num_frames must be a positive integer, got {self.n!r}")
        if self.fps is not None and not (isinstance(self.fps, (int, float)) and math.isfinite(self.fps)
                                         and self.fps > 0):
            raise FrameSpecError(f"vllm: fps must be a positive number, got {self.fps!r}")

    def __str__(self) -> str:
        return f"vllm:{self.n}" if self.fps is None else f"vllm:{self.n},fps={_num(self.fps)}"

    def indices(self, n_frames: int, rate: float | None = None) -> np.ndarray:
        """Frame indices of a video of `n_frames` frames at `rate` frames/s (the rate matters only with fps)."""
        total = max(1, int(n_frames))
        count = min(self.n, total)
        if self.fps is not None and rate and rate > 0:
            count = min(count, math.floor(total / float(rate) * self.fps))
        count = max(1, count)
        if count == total:
            return np.arange(total)
        return np.linspace(0, total - 1, count, dtype=int)

    def timestamps(self, duration: float, rate: float | None = None) -> np.ndarray:
        duration = _check_duration(duration)
        if rate and rate > 0:
            return _index_times(self.indices(_frame_total(duration, rate), rate), rate)
        # no known rate: vLLM's endpoints in seconds (as linspace does), the fps cap on the duration
        count = self.n if self.fps is None else max(1, min(self.n, math.floor(duration * self.fps)))
        return np.minimum(np.linspace(0.0, duration, count), duration * (1 - 1e-6))


@dataclass(frozen=True)
class KeyframeSnap(FrameSpec):
    """`spec`, but each target moves to the nearest keyframe within half the gap to its neighbours.

    A throughput mode for long videos: a keyframe needs no earlier frames, so each target costs one decoded
    frame instead of half a GOP on average. The frames differ from the exact spec's, hence its own text/key.
    """

    spec: FrameSpec  # a uniform, fps, segments, linspace, interior or vllm spec

    def __post_init__(self):
        if not isinstance(self.spec, (Uniform, FPS, Segments, Linspace, Interior, VLLMSampler)):
            raise FrameSpecError(f"snap=key wraps a uniform, fps, segments, linspace, interior or vllm spec, "
                                 f"got {self.spec!r}")

    def __str__(self) -> str:
        return f"{self.spec},snap=key"

    def timestamps(self, duration: float, rate: float | None = None) -> np.ndarray:
        return self.spec.timestamps(duration, rate)

    def snap(self, targets: np.ndarray, keyframes: np.ndarray, duration: float) -> np.ndarray:
        """Targets moved to keyframes (seconds) where one is close enough; others unchanged."""
        if len(keyframes) == 0:
            return targets
        t = np.asarray(targets, np.float64)
        order = np.argsort(t, kind="stable")
        gaps = np.diff(t[order])
        reach = np.empty_like(t)
        if len(t) == 1:
            reach[:] = duration / 2
        else:  # half the gap to the nearer neighbouring target: a snapped frame stays in its own slot
            reach[order] = 0.5 * np.minimum(np.r_[gaps[0], gaps], np.r_[gaps, gaps[-1]])
        keys = np.sort(np.asarray(keyframes, np.float64))
        j = np.clip(np.searchsorted(keys, t), 1, len(keys) - 1) if len(keys) > 1 else np.zeros(len(t), int)
        if len(keys) > 1:
            j = np.where(np.abs(keys[j - 1] - t) <= np.abs(keys[j] - t), j - 1, j)
        nearest = keys[j]
        return np.where(np.abs(nearest - t) <= reach, nearest, t)


def _centres(start: float, stop: float, n: int) -> np.ndarray:
    return start + (np.arange(n) + 0.5) * ((stop - start) / n)


def _check_duration(duration: float) -> float:
    if duration is None or not math.isfinite(duration) or duration <= 0:
        raise FrameSpecError(f"video duration must be a positive number of seconds, got {duration!r}")
    return float(duration)


def _num(x: float) -> str:
    return f"{float(x):g}"


def _int(s: str, text: str) -> int:
    try:
        return int(s)
    except ValueError:
        raise FrameSpecError(f"frame spec {text!r}: {s!r} is not an integer") from None


def _float(s: str, text: str) -> float:
    try:
        return float(s)
    except ValueError:
        raise FrameSpecError(f"frame spec {text!r}: {s!r} is not a number") from None


def _options(args: list[str], text: str, allowed: set[str]) -> dict[str, str]:
    opts = {}
    for a in args:
        key, eq, value = a.partition("=")
        key = key.strip().lower()
        if not eq or key not in allowed:
            raise FrameSpecError(f"frame spec {text!r}: unexpected {a!r} (allowed: {', '.join(sorted(allowed))}=VALUE)")
        opts[key] = value.strip()
    return opts
