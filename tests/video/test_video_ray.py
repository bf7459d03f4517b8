"""Ray decode workers give the same FRAMES rows and pixels as the local decoder."""

from __future__ import annotations

import numpy as np

from capeval.engine.frames.cache import decode_videos_table, load_frames, parse_locator
from capeval.engine.frames.ray_decode import decode_videos_ray
from capeval.engine.frames.sampling import FrameSpec


def test_ray_decode_matches_local(ray_local, test_videos, broken_videos, tmp_path):
    paths = [v["path"] for v in test_videos.values()] + [broken_videos["corrupt_packets"], broken_videos["vfr"],
                                                         broken_videos["missing"], broken_videos["rotated"]]
    local = decode_videos_table(paths, FrameSpec.parse("uniform:5"), 80, tmp_path / "local").to_pylist()
    remote = decode_videos_ray(paths, FrameSpec.parse("uniform:5"), 80, tmp_path / "ray", num_workers=2).to_pylist()
    assert [r["video_id"] for r in remote] == [r["video_id"] for r in local]
    for lo, re in zip(local, remote):
        assert re["frames_key"] == lo["frames_key"]
        assert (re["error"] is None) == (lo["error"] is None), (lo, re)
        if lo["error"] is None:
            # really decoded by the workers, not reused
            assert parse_locator(re["path"])["cache_dir"] == str((tmp_path / "ray").resolve())
            np.testing.assert_array_equal(re["timestamps"], lo["timestamps"])
            assert np.array_equal(load_frames(re), load_frames(lo))
    assert sum(r["error"] is not None for r in remote) == 2
