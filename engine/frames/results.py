"""What decoding gives back: `FramesResult`, or a `VideoDecodeError` subclass naming the file and what is wrong.

Below both readers of media (decode.py for videos, images.py for still images), which return and raise the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class VideoDecodeError(Exception):
    """A video that cannot give the requested frames. `path` names it; the message says why."""

    kind = "decode_error"

    def __init__(self, path: str | Path, message: str):
        self.path = str(path)
        super().__init__(f"{self.kind}: {path}: {message}")


class VideoNotFoundError(VideoDecodeError):
    kind = "not_found"


class EmptyVideoError(VideoDecodeError):
    kind = "empty_file"


class NoVideoStreamError(VideoDecodeError):
    kind = "no_video_stream"


class CorruptVideoError(VideoDecodeError):
    kind = "corrupt"


class TruncatedVideoError(VideoDecodeError):
    kind = "truncated"


@dataclass
class FramesResult:
    frames: np.ndarray  # uint8 (T, H, W, 3)
    timestamps: np.ndarray  # float64 seconds from the video start, of the frames returned
    targets: np.ndarray  # seconds asked for by the spec
    frame_spec: str
    duration: float
    frames_decoded: int = 0  # frames the decoder produced (0 on a cache hit)
    seeks: int = 0
    rotation: int = 0
    path: str | None = None  # frame-cache locator when cached (capeval.engine.frames.cache.locator)
    cache_hit: bool = False
    info: dict = field(default_factory=dict)
    media_type: str = "video"  # "image": one frame from a still image (timestamps [0.0], duration 0)
