"""`interior:K` and `vllm:K[,fps=F]` pick the frames VLMEvalKit and vLLM pick, checked against each tool's own
formula re-implemented here from the cited source (not from capeval's code), on many lengths: short clips too, where
`linspace` and `interior` repeat frames (lmms-eval#780) and vLLM gives fewer frames instead."""

from __future__ import annotations

import math

import av
import numpy as np
import pytest

from capeval.engine.datasets.synthetic_videos import make_video
from capeval.engine.frames import FrameSpec, FrameSpecError, Interior, KeyframeSnap, VLLMSampler, decode_frames
from capeval.engine.report.ordering import frame_count

LENGTHS = list(range(1, 70)) + [89, 100, 101, 250, 299, 300, 1000, 1799, 7201]


def vlmevalkit_indices(n_video_frames: int, num_frames: int) -> list[int]:
    # open-compass/VLMEvalKit@0a7916913ba45138b73b2438498a7fceaba51eee:vlmeval/dataset/video_base.py:97-98
    step_size = n_video_frames / (num_frames + 1)
    return [int(i * step_size) for i in range(1, num_frames + 1)]


def vllm_indices(total_frames_num: int, original_fps: float, num_frames: int = -1, fps: float = -1) -> list[int]:
    # vllm-project/vllm@e5005d0743bd21533acc0184e0595a51ec3f1c52:vllm/multimodal/video.py:205-229
    # (VideoBackend.compute_frames_index_to_sample; duration = total_frames_num / original_fps)
    duration = total_frames_num / original_fps if original_fps > 0 else 0
    num_frames_to_sample = total_frames_num
    if num_frames > 0:
        num_frames_to_sample = min(num_frames, total_frames_num)
    if fps > 0:
        num_frames_to_sample = min(num_frames_to_sample, math.floor(duration * fps))
    num_frames_to_sample = max(1, num_frames_to_sample)
    if num_frames_to_sample == total_frames_num:
        return list(range(num_frames_to_sample))
    return np.linspace(0, total_frames_num - 1, num_frames_to_sample, dtype=int).tolist()


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16, 32, 64])
def test_interior_matches_vlmevalkit_on_every_length(k):
    for n in LENGTHS:
        assert Interior(k).indices(n).tolist() == vlmevalkit_indices(n, k), (n, k)


def test_interior_repeats_frames_on_a_short_clip_and_never_takes_the_first():
    idx = Interior(8).indices(5).tolist()
    assert idx == vlmevalkit_indices(5, 8) and len(idx) == 8 and len(set(idx)) < 8  # duplicates, as VLMEvalKit
    assert all(Interior(8).indices(n)[0] > 0 for n in range(9, 200))


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("rate", [10.0, 24.0, 25.0, 29.97, 30.0, 60.0])
def test_vllm_matches_vllms_sampler_on_every_length(k, rate):
    for n in LENGTHS:
        assert VLLMSampler(k).indices(n, rate).tolist() == vllm_indices(n, rate, num_frames=k), (n, k, rate)
        for fps in (0.5, 1.0, 2.0):
            got = VLLMSampler(k, fps).indices(n, rate).tolist()
            assert got == vllm_indices(n, rate, num_frames=k, fps=fps), (n, k, rate, fps)


def test_vllm_gives_each_frame_once_on_a_short_clip_where_linspace_repeats():
    assert VLLMSampler(8).indices(5).tolist() == [0, 1, 2, 3, 4]
    assert len(set(FrameSpec.parse("linspace:8").indices(5).tolist())) < 8


@pytest.mark.parametrize("text", ["interior:8", "vllm:8", "vllm:32,fps=2", "vllm:8,fps=0.5", "interior:4,snap=key",
                                  "vllm:8,snap=key"])
def test_peer_specs_have_a_canonical_text(text):
    spec = FrameSpec.parse(text)
    assert str(spec) == text and FrameSpec.parse(str(spec)) == spec
    assert frame_count(text) == int(text.split(":")[1].split(",")[0])
    if text.endswith("snap=key"):
        assert isinstance(spec, KeyframeSnap)


@pytest.mark.parametrize("bad", ["interior:0", "interior:2.5", "interior:3,4", "vllm:0", "vllm:8,fps=0",
                                 "vllm:8,fps=-1", "vllm:8,max=3", "vllm:"])
def test_peer_specs_refuse_bad_arguments(bad):
    with pytest.raises(FrameSpecError):
        FrameSpec.parse(bad)


def test_without_a_rate_the_peer_specs_still_give_times_inside_the_video():
    ts = Interior(4).timestamps(10.0)
    np.testing.assert_allclose(ts, [2, 4, 6, 8])
    v = VLLMSampler(3).timestamps(10.0)
    assert v[0] == 0.0 and 0 < v[-1] < 10.0 and len(v) == 3
    assert len(VLLMSampler(8, fps=0.5).timestamps(4.0)) == 2


@pytest.mark.parametrize("seconds,fps", [(3.0, 10), (0.5, 10), (0.4, 25)])
@pytest.mark.parametrize("text", ["interior:7", "vllm:7", "vllm:16,fps=2"])
def test_a_real_video_decodes_exactly_the_peer_frames(tmp_path, text, seconds, fps):
    path = tmp_path / "v.mp4"
    make_video(path, codec="libx264", seconds=seconds, fps=fps, size=(64, 48), seed=3)
    with av.open(str(path)) as c:
        ref = [f.to_ndarray(format="rgb24") for f in c.decode(c.streams.video[0])]
    spec = FrameSpec.parse(text)
    want = (vlmevalkit_indices(len(ref), spec.n) if isinstance(spec, Interior)
            else vllm_indices(len(ref), float(fps), num_frames=spec.n, fps=spec.fps or -1))
    r = decode_frames(path, spec)
    assert r.frames.shape[0] == len(want)
    np.testing.assert_allclose(r.timestamps, np.asarray(want) / fps)
    for got, idx in zip(r.frames, want):
        assert np.array_equal(got, ref[idx])
