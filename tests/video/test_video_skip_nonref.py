"""Skipping non-reference frames (skip_frame=NONREF) on the way to a target: same frames, fewer decoded."""

from __future__ import annotations

import av
import numpy as np
import pytest

from capeval.engine.frames.decode import decode_frames
from capeval.engine.frames.sampling import FrameSpec


def _decode_all(path):
    """{pts seconds: RGB array} for every frame, decoded with default settings (no skipping)."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        start = s.start_time or 0
        return {round(float((f.pts - start) * s.time_base), 6): f.to_ndarray(format="rgb24") for f in c.decode(s)}


@pytest.fixture(scope="session")
def reordered_clips(tmp_path_factory, test_videos) -> dict:
    """H.264 with B-frames (x264 bframes=3, b-pyramid) and, when this PyAV build has libx265, HEVC (x265
    defaults: B-frames too); 6 s, keyframe every 2 s, so targets sit deep inside GOPs."""
    from capeval.engine.datasets.synthetic_videos import make_video

    d = tmp_path_factory.mktemp("reordered")
    clips = {"h264_bframes": test_videos["h264_bframes"]["path"]}
    make_video(d / "h264_b3.mp4", codec="h264", seconds=6, fps=25, gop_seconds=2, bframes=3, seed=21, sidecar=False)
    clips["h264_b3_gop2"] = d / "h264_b3.mp4"
    try:
        av.codec.Codec("libx265", "w")
    except Exception:  # noqa: BLE001 - not in this build
        return clips
    make_video(d / "hevc.mkv", codec="libx265", seconds=6, fps=25, gop_seconds=2, seed=22, container_format="matroska",
               sidecar=False)
    clips["hevc"] = d / "hevc.mkv"
    return clips


@pytest.mark.parametrize("name", ["h264_bframes", "h264_b3_gop2", "hevc"])
@pytest.mark.parametrize("spec", ["uniform:5", "fps:3"])
def test_skipping_returns_decode_all_pixels_and_decodes_less(reordered_clips, name, spec):
    if name not in reordered_clips:
        pytest.skip("this PyAV build cannot encode HEVC")
    path = reordered_clips[name]
    ref = _decode_all(path)
    times = np.array(sorted(ref))
    with av.open(str(path)) as c:  # the premise: decode order differs from display order (B-frames)
        pts = [p.pts for p in c.demux(video=0) if p.pts is not None]
    assert pts != sorted(pts)
    skipped = decode_frames(path, FrameSpec.parse(spec))
    full = decode_frames(path, FrameSpec.parse(spec), skip_nonref=False)
    np.testing.assert_array_equal(skipped.timestamps, full.timestamps)
    for target, t, frame in zip(skipped.targets, skipped.timestamps, skipped.frames):
        assert round(float(t), 6) in ref, f"{t} is not the pts of a frame"
        assert np.array_equal(frame, ref[round(float(t), 6)]), f"{name}: pixels differ at {t}"
        assert abs(t - target) <= np.min(np.abs(times - target)) + 1e-6  # still the nearest frame
    np.testing.assert_array_equal(skipped.frames, full.frames)
    assert skipped.frames_decoded < full.frames_decoded, (skipped.frames_decoded, full.frames_decoded)


def test_skipping_is_off_for_codecs_not_proven_safe(test_videos):
    for codec in ("vp9", "av1"):
        if codec not in test_videos:
            continue
        path = test_videos[codec]["path"]
        on, off = decode_frames(path, FrameSpec.parse("uniform:5")), decode_frames(path, FrameSpec.parse("uniform:5"), skip_nonref=False)
        assert on.frames_decoded == off.frames_decoded and np.array_equal(on.frames, off.frames)
