"""Fixtures that encode real videos with PyAV (H.264/VP9/AV1, short and long) and corrupt variants.

Session-scoped so the whole suite encodes each video once (all small: 160x120, a few seconds). Each entry of
`test_videos` is {"path": Path, "truth": ground-truth dict from capeval.engine.datasets.synthetic_videos.make_video}.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["video_codecs", "test_videos", "broken_videos", "frame_cache_dir"]


@pytest.fixture(scope="session")
def video_codecs() -> dict[str, str]:
    """{logical codec: encoder} this PyAV build can encode and decode (h264 always; vp9, av1 when present)."""
    from capeval.engine.datasets.synthetic_videos import available_encoders

    codecs = available_encoders()
    assert "h264" in codecs, f"PyAV build lacks libx264: {codecs}"
    return codecs


@pytest.fixture(scope="session")
def test_videos(tmp_path_factory, video_codecs) -> dict[str, dict]:
    """Short clips per codec ("h264", "vp9", "av1" when available), H.264 with B-frames ("h264_bframes") and a
    longer H.264 one ("h264_long", 10 s, keyframe every 2 s)."""
    from capeval.engine.datasets.synthetic_videos import make_video

    d = tmp_path_factory.mktemp("videos")
    ext = {"h264": "mp4", "vp9": "webm", "av1": "mkv"}
    videos = {}
    for i, codec in enumerate(video_codecs):
        path = d / f"{codec}_short.{ext[codec]}"
        videos[codec] = {"path": path, "truth": make_video(path, codec=codec, seconds=3, fps=24, gop_seconds=1, seed=i)}
    path = d / "h264_bframes.mp4"  # decode order != display order, MP4 index holds decode times
    videos["h264_bframes"] = {"path": path, "truth": make_video(path, codec="h264", seconds=4, fps=25, gop_seconds=1,
                                                                 bframes=3, seed=7)}
    path = d / "h264_long.mp4"
    videos["h264_long"] = {"path": path, "truth": make_video(path, codec="h264", seconds=10, fps=25, gop_seconds=2, seed=9)}
    return videos


@pytest.fixture(scope="session")
def broken_videos(tmp_path_factory) -> dict[str, Path]:
    """Bad inputs by name: missing, zero_bytes, not_a_video, truncated, corrupt_packets, audio_only, unknown_duration, vfr,
    rotated, large (4096x2160)."""
    from capeval.engine.datasets.synthetic_videos import make_broken_videos

    return make_broken_videos(tmp_path_factory.mktemp("broken_videos"))


@pytest.fixture
def frame_cache_dir(tmp_path) -> Path:
    """An empty frame-cache directory for one test."""
    d = tmp_path / "frames_cache"
    d.mkdir()
    return d
