"""Frames stage: sampling specs, sparse PyAV decoding, decode sizes, the JPEG frame cache and Ray decode workers.

    from capeval.engine.frames import FrameSpec, decode_frames, decode_frames_cached, decode_videos_table
    from capeval.engine.frames.ray_decode import decode_videos_ray, DecodePool   # needs ray.init()
"""

from capeval.engine.frames.cache import (decode_frames_cached, decode_videos_table, frames_row, load_encoded_frames,
                                 load_frames)
from capeval.engine.frames.decode import (
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
from capeval.engine.frames.sizes import DEFAULT_SIZE, SizeError, frame_size_for, parse_size
from capeval.engine.frames.images import decode_image, is_image_path, media_type_of
from capeval.engine.frames.sampling import (FPS, FrameSpec, FrameSpecError, Interior, KeyframeSnap, Linspace, Segments,
                                            Uniform, VLLMSampler)

__all__ = [
    "FPS", "FrameSpec", "CorruptVideoError", "Interior", "KeyframeSnap", "Linspace", "VLLMSampler", "decode_image", "is_image_path", "media_type_of", "EmptyVideoError", "FrameSpecError", "FramesResult", "NoVideoStreamError",
    "Segments", "TruncatedVideoError", "Uniform", "VideoDecodeError", "VideoNotFoundError", "decode_frames",
    "decode_frames_cached", "decode_videos_table", "frames_row", "load_encoded_frames", "load_frames",
    "DEFAULT_SIZE", "SizeError", "frame_size_for", "parse_size",
    "probe_duration", "size_text",
]
