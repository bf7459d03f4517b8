"""bench decode's baselines return the frames capeval's decoder returns, at the bench's size, however they split work."""

from __future__ import annotations

import numpy as np

import capeval.benchmarks.bench_decode as bench_decode
from capeval.engine.frames.decode import decode_frames
from capeval.engine.frames.sampling import FrameSpec


def test_lower_bound_over_workers_and_decode_all_match_ours_at_the_size(test_videos):
    path = test_videos["h264_long"]["path"]  # 10 s, keyframe every 2 s: 8 targets in 5 GOPs
    ours = decode_frames(path, FrameSpec.parse("uniform:8"), 80)
    keys = bench_decode.keyframe_display_times(path)
    one, n_one = bench_decode.lower_bound(path, ours.timestamps, keys, 80, workers=1)
    split, n_split = bench_decode.lower_bound(path, ours.timestamps, keys, 80, workers=2)
    every, n_every = bench_decode.decode_all_then_pick(path, ours.timestamps, 80)
    assert ours.frames.shape[1:] == (60, 80, 3)  # the resize is on: 160x120 -> longer side 80
    for frames in (one, split, every):
        np.testing.assert_array_equal(frames, ours.frames)
    assert n_split == n_one < n_every  # the split decodes the same keyframe -> target runs, no more
