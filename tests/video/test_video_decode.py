"""Sparse decoding against a decode-every-frame reference, on real encoded videos and bad inputs."""

from __future__ import annotations

import av
import numpy as np
import pytest

from capeval.engine.frames.decode import (
    CorruptVideoError,
    EmptyVideoError,
    NoVideoStreamError,
    TruncatedVideoError,
    VideoNotFoundError,
    decode_frames,
    probe_duration,
)
from capeval.engine.frames.sampling import FrameSpec


def decode_all(path, width=None, height=None):
    """Reference: every frame in presentation order as (seconds, RGB array), like lmms-eval's loader."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        start = s.start_time or 0
        kw = {"format": "rgb24"} | ({"width": width, "height": height} if width else {})
        return [(float((f.pts - start) * s.time_base), f.to_ndarray(**kw)) for f in c.decode(s)]


def assert_matches_reference(result, ref):
    ref_t = np.array([t for t, _ in ref])
    interval = np.median(np.diff(ref_t))
    for target, got_t, got in zip(result.targets, result.timestamps, result.frames):
        j = int(np.argmin(np.abs(ref_t - got_t)))
        assert abs(ref_t[j] - got_t) < 1e-6, f"returned time {got_t} is not the pts of any frame"
        assert abs(got_t - target) <= interval + 1e-6, f"frame at {got_t} is more than one interval from {target}"
        # nearest frame: no other frame is closer to the target by more than rounding
        assert abs(got_t - target) <= np.min(np.abs(ref_t - target)) + 1e-6
        assert np.array_equal(got, ref[j][1]), f"pixels differ from the decode-all frame at {got_t}"


@pytest.mark.parametrize("codec", ["h264", "vp9", "av1", "h264_bframes"])
def test_uniform_frames_equal_decode_all(codec, test_videos):
    if codec not in test_videos:
        pytest.skip(f"this PyAV build cannot encode {codec}")
    video = test_videos[codec]
    result = decode_frames(video["path"], FrameSpec.parse("uniform:8"))
    assert result.frames.shape == (8, 120, 160, 3) and result.frames.dtype == np.uint8
    assert result.duration == pytest.approx(video["truth"]["duration_s"], abs=0.05)
    ref = decode_all(video["path"])
    assert_matches_reference(result, ref)
    assert result.frames_decoded <= len(ref)  # seeks never land before a GOP already decoded


def test_long_video_skips_gops_and_matches(test_videos):
    video = test_videos["h264_long"]  # 10 s, 25 fps, keyframe every 2 s
    result = decode_frames(video["path"], FrameSpec.parse("uniform:4"))
    ref = decode_all(video["path"])
    assert_matches_reference(result, ref)
    assert result.seeks >= 4  # one target per GOP: each needs a jump
    assert result.frames_decoded < len(ref) / 2  # decoding only keyframe..target runs, not everything


def test_fps_sampling_count_and_times(test_videos):
    video = test_videos["h264_long"]
    result = decode_frames(video["path"], FrameSpec.parse("fps:2"))
    duration = video["truth"]["duration_s"]
    assert len(result.frames) == len(FrameSpec.parse("fps:2").timestamps(duration)) == 20
    assert_matches_reference(result, decode_all(video["path"]))


def test_more_targets_than_frames_repeat_frames(test_videos):
    video = test_videos["h264"]  # 72 frames
    result = decode_frames(video["path"], FrameSpec.parse("uniform:100"))
    assert result.frames.shape[0] == 100
    assert len(np.unique(result.timestamps)) <= 72
    assert np.all(np.diff(result.timestamps) >= 0)


def test_resize_in_decoder(test_videos):
    video = test_videos["h264"]
    exact = decode_frames(video["path"], FrameSpec.parse("uniform:3"), (64, 48))
    assert exact.frames.shape == (3, 48, 64, 3)
    assert_matches_reference(exact, decode_all(video["path"], 64, 48))
    longer_side = decode_frames(video["path"], FrameSpec.parse("uniform:3"), 80)  # keep aspect: 160x120 -> 80x60
    assert longer_side.frames.shape == (3, 60, 80, 3)


def test_very_large_resolution_is_resized(broken_videos):
    result = decode_frames(broken_videos["large"], FrameSpec.parse("uniform:4"), 256)  # 4096x2160 source
    assert result.frames.shape == (4, 136, 256, 3)
    assert_matches_reference(result, decode_all(broken_videos["large"], 256, 136))


def test_rotation_metadata_is_applied(broken_videos):
    result = decode_frames(broken_videos["rotated"], FrameSpec.parse("uniform:4"))  # coded 160x120, display matrix 90° CCW
    assert result.rotation == 90
    assert result.frames.shape == (4, 160, 120, 3)
    ref = [(t, np.rot90(img)) for t, img in decode_all(broken_videos["rotated"])]
    assert_matches_reference(result, ref)


def test_variable_frame_rate_uses_pts(broken_videos):
    ref = decode_all(broken_videos["vfr"])
    ref_t = np.array([t for t, _ in ref])
    assert len(set(np.round(np.diff(ref_t), 3))) > 2  # really variable
    result = decode_frames(broken_videos["vfr"], FrameSpec.parse("uniform:10"))
    for target, got_t in zip(result.targets, result.timestamps):
        assert np.min(np.abs(ref_t - got_t)) < 1e-6
        before, after = ref_t[ref_t <= target].max(), ref_t[ref_t >= target].min()
        assert before - 1e-6 <= got_t <= after + 1e-6, f"target {target}: got {got_t}, neighbours {before}..{after}"


def test_unknown_duration_falls_back_to_scanning(broken_videos):
    with av.open(str(broken_videos["unknown_duration"])) as c:
        assert c.duration is None and not c.streams.video[0].duration  # the premise of the test
    ref = decode_all(broken_videos["unknown_duration"])
    expected = ref[-1][0] + (ref[-1][0] - ref[-2][0])
    assert probe_duration(broken_videos["unknown_duration"]) == pytest.approx(expected, abs=0.05)
    result = decode_frames(broken_videos["unknown_duration"], FrameSpec.parse("uniform:6"))
    assert_matches_reference(result, ref)


@pytest.mark.parametrize(
    "variant, error, fragment",
    [
        ("missing", VideoNotFoundError, "no such file"),
        ("zero_bytes", EmptyVideoError, "zero bytes"),
        ("not_a_video", CorruptVideoError, "cannot open container"),
        ("truncated", TruncatedVideoError, "data ends at"),
        ("corrupt_packets", CorruptVideoError, "corrupt packet"),
        ("audio_only", NoVideoStreamError, "streams: audio"),
    ],
)
def test_bad_inputs_raise_clear_errors(broken_videos, variant, error, fragment):
    with pytest.raises(error) as exc:
        decode_frames(broken_videos[variant], FrameSpec.parse("uniform:8"))
    assert fragment in str(exc.value) and str(broken_videos[variant]) in str(exc.value)


def test_keyframe_snap_decodes_one_frame_per_target(test_videos):
    video = test_videos["h264_long"]  # 10 s, keyframes every 2 s
    result = decode_frames(video["path"], FrameSpec.parse("uniform:5,snap=key"))  # targets 1,3,5,7,9 -> keyframes 0|2,2|4,...
    with av.open(str(video["path"])) as c:
        keys = {round(float(f.time), 6) for f in c.decode(video=0) if f.key_frame}
    assert all(round(float(t), 6) in keys for t in result.timestamps), result.timestamps
    assert np.all(np.abs(result.timestamps - result.targets) <= 1.0 + 1e-6)
    assert len(set(result.timestamps.tolist())) == 5
    assert result.frames_decoded <= 2 * 5  # about one frame per target (plus decoder look-ahead)
    assert_matches_reference_pixels(result, decode_all(video["path"]))


def assert_matches_reference_pixels(result, ref):
    ref_t = np.array([t for t, _ in ref])
    for got_t, got in zip(result.timestamps, result.frames):
        j = int(np.argmin(np.abs(ref_t - got_t)))
        assert abs(ref_t[j] - got_t) < 1e-6 and np.array_equal(got, ref[j][1])


@pytest.mark.parametrize("name", ["h264_long", "h264_bframes"])
def test_mp4_index_agrees_with_keyframe_display_times(test_videos, name):
    from capeval.engine.frames.decode import KeyframeIndex

    path = test_videos[name]["path"]
    with av.open(str(path)) as c:  # FFmpeg's index lives only as long as the open container
        shown = np.array(sorted(float(f.time) for f in c.decode(video=0) if f.key_frame))  # display order
    scanned = KeyframeIndex(times=shown)
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        index = KeyframeIndex(index=s.index_entries, time_base=float(s.time_base))
        for t in np.linspace(0, test_videos[name]["truth"]["duration_s"] - 0.01, 23):
            assert index.before(t) == pytest.approx(scanned.before(t), abs=1e-6)
            if scanned.after(t) is not None:
                assert index.after(t) == pytest.approx(scanned.after(t), abs=1e-6)


def test_gop_ranges_decode_in_parallel_and_return_what_one_decoder_returns(test_videos, monkeypatch):
    """threads="auto" on several cores splits targets in several GOPs into ranges, each decoded by its own container
    in its own thread; frames, times, frames decoded and seeks are those of one decoder going through them all."""
    import threading

    import capeval.engine.frames.decode as decode

    video = test_videos["h264_long"]  # 10 s, keyframe every 2 s
    monkeypatch.setattr(decode.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    opened = []
    real_open = decode.av.open

    def counting_open(*args, **kwargs):
        opened.append(threading.current_thread().name)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(decode.av, "open", counting_open)
    for spec in ("uniform:4", "fps:2", "uniform:16"):
        opened.clear()
        ranged = decode_frames(video["path"], FrameSpec.parse(spec), 80)
        workers = [name for name in opened if name.startswith("capeval-decode")]
        assert len(workers) >= 2, opened  # the premise: the ranges did the decoding
        one = decode_frames(video["path"], FrameSpec.parse(spec), 80, threads=1)
        np.testing.assert_array_equal(ranged.frames, one.frames)
        np.testing.assert_array_equal(ranged.timestamps, one.timestamps)
        assert (ranged.frames_decoded, ranged.seeks) == (one.frames_decoded, one.seeks)
    assert_matches_reference(ranged, decode_all(video["path"], 80, 60))


def test_a_range_that_fails_leaves_the_video_to_one_decoder(test_videos, monkeypatch):
    """Any error in a range (here: its container cannot be opened) is no verdict on the video: one decoder decodes
    it all again, with the result one decoder gives."""
    import threading

    import capeval.engine.frames.decode as decode

    video = test_videos["h264_long"]
    expected = decode_frames(video["path"], FrameSpec.parse("uniform:8"), threads=1)
    monkeypatch.setattr(decode.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    real_open, refused = decode.av.open, []

    def open_refused_in_ranges(*args, **kwargs):
        if threading.current_thread().name.startswith("capeval-decode"):
            refused.append(args[0])
            raise OSError(24, "Too many open files")
        return real_open(*args, **kwargs)

    monkeypatch.setattr(decode.av, "open", open_refused_in_ranges)
    result = decode_frames(video["path"], FrameSpec.parse("uniform:8"))
    assert refused  # the premise: the ranges were tried
    np.testing.assert_array_equal(result.frames, expected.frames)
    np.testing.assert_array_equal(result.timestamps, expected.timestamps)
    assert (result.frames_decoded, result.seeks) == (expected.frames_decoded, expected.seeks)
