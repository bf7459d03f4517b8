"""Shot detection with PySceneDetect (engine/frames/scenes.py) on H.264 clips with hard cuts at known frames, and the
per-video boundaries that items carry."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from _scene_videos import make_cut_video
from capeval.engine.frames.scenes import (DEFAULT_THRESHOLD, SceneDetectionError, ShotList, detect_shots, video_boundaries)
from capeval.engine.schemas import ITEMS, conform

FPS = 24


def test_cuts_are_found_within_a_frame_of_where_they_are(tmp_path):
    shots = [("red", 36), ("green", 50), ("blue", 20), ("yellow", 41)]
    truth = make_cut_video(tmp_path / "cuts.mp4", shots, fps=FPS)
    found = detect_shots(tmp_path / "cuts.mp4")
    assert len(found.cuts) == len(truth)
    assert all(abs(a - b) <= 1 / FPS + 1e-6 for a, b in zip(found.cuts, truth)), (found.cuts, truth)
    # shots tile the video: from 0 to the end of the last frame, each starting where the previous ended
    assert found.shots[0].start == 0.0 and found.duration == pytest.approx(sum(n for _, n in shots) / FPS, abs=1e-6)
    assert all(a.end == b.start for a, b in zip(found.shots, found.shots[1:]))
    assert found.fps == FPS and found.threshold == DEFAULT_THRESHOLD
    assert ShotList.from_dict(json.loads(json.dumps(found.as_dict()))) == found


def test_motion_inside_a_shot_is_not_a_cut(tmp_path):
    make_cut_video(tmp_path / "one.mp4", [("blue", 60)], fps=FPS)
    found = detect_shots(tmp_path / "one.mp4")
    assert found.cuts == () and len(found.shots) == 1
    assert found.shots[0].start == 0.0 and found.shots[0].end == pytest.approx(60 / FPS, abs=1e-6)


def test_threshold_decides_what_change_is_a_cut(tmp_path):
    # gray 128 -> 158: HSV value +30, hue and saturation unchanged: a mean change of ~10 per channel
    truth = make_cut_video(tmp_path / "soft.mp4", [("gray", 30), ("light gray", 30)], fps=FPS)
    assert detect_shots(tmp_path / "soft.mp4").cuts == ()  # under the default 27
    low = detect_shots(tmp_path / "soft.mp4", threshold=5.0)
    assert len(low.cuts) == 1 and abs(low.cuts[0] - truth[0]) <= 1 / FPS + 1e-6


def test_min_shot_length_merges_cuts_closer_than_it(tmp_path):
    truth = make_cut_video(tmp_path / "flash.mp4", [("red", 24), ("green", 6), ("blue", 30)], fps=FPS)
    every = detect_shots(tmp_path / "flash.mp4", min_shot_s=0.1)
    assert len(every.cuts) == 2 and all(abs(a - b) <= 1 / FPS + 1e-6 for a, b in zip(every.cuts, truth))
    merged = detect_shots(tmp_path / "flash.mp4", min_shot_s=0.5)  # the 0.25 s green shot is too short
    assert len(merged.cuts) == 1 and abs(merged.cuts[0] - truth[0]) <= 1 / FPS + 1e-6


def test_unreadable_inputs_fail_naming_the_file(tmp_path):
    with pytest.raises(SceneDetectionError, match="not found"):
        detect_shots(tmp_path / "missing.mp4")
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all" * 100)
    with pytest.raises(SceneDetectionError, match="bad.mp4"):
        detect_shots(bad)
    with pytest.raises(ValueError, match="threshold"):
        detect_shots(bad, threshold=0)


def _items(rows):
    full = [{"benchmark": "lvcap", "task": "scene", "media_type": "video", **r} for r in rows]
    return conform(pa.Table.from_pylist(full), ITEMS)


def test_items_give_each_video_its_boundaries():
    items = _items([
        {"item_id": "a/1", "video_id": "a",
         "extra": json.dumps({"scene_boundaries": [4.5], "shot_boundaries": [2, 4.5]})},
        {"item_id": "a/2", "video_id": "a", "extra": json.dumps({"scene_boundaries": [4.5]})},
        {"item_id": "b/1", "video_id": "b", "extra": json.dumps({"shot_boundaries": [1.25, 3]})},
        {"item_id": "c/1", "video_id": "c", "extra": json.dumps({"scene": 1})},
        {"item_id": "d/1", "video_id": "d", "extra": None},
    ])
    # scene cuts win; without them the detected shot cuts; videos with neither have none
    assert video_boundaries(items) == {"a": (4.5,), "b": (1.25, 3.0)}
    clash = _items([{"item_id": "a/1", "video_id": "a", "extra": json.dumps({"scene_boundaries": [4.5]})},
                    {"item_id": "a/2", "video_id": "a", "extra": json.dumps({"scene_boundaries": [5.0]})}])
    with pytest.raises(ValueError, match="video 'a'.*different scene boundaries"):
        video_boundaries(clash)
    for bad in ([3, 2], [0, 1], "1|2", [1, True]):
        with pytest.raises(ValueError, match="item 'x' extra.scene_boundaries"):
            video_boundaries(_items([{"item_id": "x", "video_id": "x",
                                      "extra": json.dumps({"scene_boundaries": bad})}]))
