"""Frames stage: sampling specs, sparse PyAV decoding, the decoded-frame cache and Ray decode workers.

    from engine.frames import parse_frame_spec, decode_frames, decode_frames_cached, decode_videos_table
    from engine.frames.ray_decode import decode_videos_ray, DecodePool   # needs ray.init()
"""

from engine.frames.cache import decode_frames_cached, decode_videos_table, frames_key, frames_row, load_frames
from engine.frames.decode import (
    CorruptVideoError,
    EmptyVideoError,
    FramesResult,
    NoVideoStreamError,
    TruncatedVideoError,
    VideoDecodeError,
    VideoNotFoundError,
    decode_frames,
    probe_duration,
    size_text,
)
from engine.frames.images import decode_image, is_image_path, media_type_of
from engine.frames.sampling import (FPS, FrameSpecError, KeyframeSnap, Linspace, Segments, Uniform, parse_frame_spec,
                                    target_timestamps)

__all__ = [
    "FPS", "CorruptVideoError", "KeyframeSnap", "Linspace", "decode_image", "is_image_path", "media_type_of", "EmptyVideoError", "FrameSpecError", "FramesResult", "NoVideoStreamError",
    "Segments", "TruncatedVideoError", "Uniform", "VideoDecodeError", "VideoNotFoundError", "decode_frames",
    "decode_frames_cached", "decode_videos_table", "frames_key", "frames_row", "load_frames", "parse_frame_spec",
    "probe_duration", "size_text", "target_timestamps",
]
