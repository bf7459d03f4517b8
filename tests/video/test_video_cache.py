"""Decoded-frame cache and the FRAMES batch table: hits skip decoding, bad videos give error rows."""

from __future__ import annotations

import shutil

import numpy as np

from capeval.engine import schemas
from capeval.engine.frames import cache as frame_cache
from capeval.engine.frames.cache import decode_frames_cached, decode_videos_table, load_frames
from capeval.engine.frames.decode import decode_frames
from capeval.engine.frames.sampling import FrameSpec


def test_cache_hit_avoids_decoding(test_videos, frame_cache_dir, tmp_path):
    path = test_videos["h264"]["path"]
    first = decode_frames_cached(path, FrameSpec.parse("uniform:6"), 64, frame_cache_dir)
    assert not first.cache_hit and first.frames_decoded > 0
    stored = {p: p.stat().st_size for p in frame_cache_dir.rglob("*")}
    decodes = frame_cache.DECODES["count"]

    second = decode_frames_cached(path, FrameSpec.parse("uniform:6"), 64, frame_cache_dir)
    assert second.cache_hit and second.frames_decoded == 0
    assert frame_cache.DECODES["count"] == decodes  # no decoder ran
    assert np.array_equal(first.frames, second.frames)
    np.testing.assert_array_equal(first.timestamps, second.timestamps)
    assert {p: p.stat().st_size for p in frame_cache_dir.rglob("*")} == stored  # a hit writes nothing

    copy = tmp_path / "renamed_copy.mp4"  # keyed by content, not by path
    shutil.copy(path, copy)
    assert decode_frames_cached(copy, FrameSpec.parse("uniform:6"), 64, frame_cache_dir).cache_hit
    assert not decode_frames_cached(path, FrameSpec.parse("uniform:6"), 32, frame_cache_dir).cache_hit  # other size: other entry
    assert not decode_frames_cached(path, FrameSpec.parse("uniform:5"), 64, frame_cache_dir).cache_hit  # other spec
    assert not list(frame_cache_dir.rglob("*.tmp"))  # atomic writes leave no temporaries


def test_cached_frames_are_the_jpeg_of_the_direct_decode(test_videos, frame_cache_dir):
    """The cache stores JPEG (quality shards.JPEG_QUALITY): the pixels are the direct decode's within JPEG error,
    and every load (the miss that stored them included) returns exactly the stored pixels."""
    path = test_videos["h264_long"]["path"]
    cached = decode_frames_cached(path, FrameSpec.parse("fps:1"), None, frame_cache_dir)
    direct = decode_frames(path, FrameSpec.parse("fps:1"))
    assert cached.frames.shape == direct.frames.shape
    np.testing.assert_array_equal(cached.timestamps, direct.timestamps)
    err = np.abs(cached.frames.astype(int) - direct.frames.astype(int))
    assert err.mean() < 3.0, err.mean()
    assert np.array_equal(load_frames(cached.path), cached.frames)
    assert np.array_equal(decode_frames_cached(path, FrameSpec.parse("fps:1"), None, frame_cache_dir).frames, cached.frames)


def test_batch_table_has_error_rows_and_goes_on(test_videos, broken_videos, frame_cache_dir):
    good = [test_videos["h264"]["path"], test_videos["h264_long"]["path"]]
    bad = ["missing", "zero_bytes", "not_a_video", "truncated", "corrupt_packets", "audio_only"]
    usable = ["unknown_duration", "vfr", "rotated", "large"]
    paths = [good[0]] + [broken_videos[b] for b in bad] + [broken_videos[u] for u in usable] + [good[1]]
    ids = ["good0"] + bad + usable + ["good1"]
    seen = []
    table = decode_videos_table(paths, FrameSpec.parse("uniform:4"), 96, frame_cache_dir, video_ids=ids,
                                progress=lambda done, total: seen.append((done, total)))
    assert table.schema.equals(schemas.FRAMES)
    assert seen[-1] == (len(paths), len(paths))
    rows = {r["video_id"]: r for r in table.to_pylist()}
    assert table.column("video_id").to_pylist() == ids  # input order kept
    for name in bad:
        assert rows[name]["error"] and str(broken_videos[name]) in rows[name]["error"], rows[name]
        assert rows[name]["path"] is None and rows[name]["frames_key"]
    for name in ["good0", "good1"] + usable:
        row = rows[name]
        assert row["error"] is None, row
        frames = load_frames(row)
        assert frames.shape == (4, row["height"], row["width"], 3) and max(row["height"], row["width"]) == 96
        assert len(row["timestamps"]) == 4
    assert len(set(table.column("frames_key").to_pylist())) == len(paths)
