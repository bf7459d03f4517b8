"""Segmental captioning follows each video's own scene boundaries (the items' extra.scene_boundaries /
shot_boundaries) instead of equal parts or one global `segments:at=` list; without boundaries nothing changes."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from _caption_worker import RecordingCaptioner, worker_around
from capeval.engine.prompts_library import get_prompt
from capeval.engine.schemas import ITEMS, conform
from capeval.engine.stages.caption import CaptionTask, segment_chunks

TIMES = (0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.25, 3.75)  # 8 frames of a 4 s video


def test_chunks_split_at_the_video_boundaries_by_timestamp():
    # scenes [0, 1.5), [1.5, 3.6), [3.6, end): 3 + 4 + 1 frames, whatever the spec or the segment count says
    assert segment_chunks("uniform:8", 8, 4, TIMES, boundaries=(1.5, 3.6)) == [[0, 1, 2], [3, 4, 5, 6], [7]]
    assert segment_chunks("segments:length=60,per=8", 8, 4, TIMES, boundaries=(1.5, 3.6)) == \
        [[0, 1, 2], [3, 4, 5, 6], [7]]
    # a scene no sampled frame falls in (2.4-2.5 s) has no segment
    assert segment_chunks("uniform:8", 8, 4, TIMES, boundaries=(1.5, 2.4, 2.5)) == [[0, 1, 2], [3, 4], [5, 6, 7]]
    # timestamps unknown: one part per scene, equal in frames
    assert segment_chunks("uniform:8", 8, 4, (), boundaries=(1.5, 3.6)) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    # no boundaries: as before (equal parts; the frame spec's own segments)
    assert segment_chunks("uniform:8", 8, 4, TIMES) == segment_chunks("uniform:8", 8, 4, TIMES, boundaries=()) == \
        [[0, 1], [2, 3], [4, 5], [6, 7]]


def _segmental(boundaries=()):
    worker = worker_around(RecordingCaptioner())
    p = get_prompt("lvcap_segment")
    task = CaptionTask("k", "v", "unused.npy", TIMES, "uniform:8", p.id, p.text, segments=4, boundaries=boundaries)
    row = worker._segmental(task, np.zeros((8, 8, 8, 3), np.uint8))
    return row, worker.model.requests


def test_the_worker_captions_one_segment_per_scene_of_the_video():
    row, requests = _segmental((1.5, 3.6))
    assert [r.timestamps for r in requests] == [TIMES[:3], TIMES[3:7], TIMES[7:]]
    assert row["text"] == "Segment 1: part 1\nSegment 2: part 2\nSegment 3: part 3"
    assert requests[2].context.endswith("Segment 1: part 1\nSegment 2: part 2")
    plain, requests = _segmental()  # without boundaries: the four equal parts of before
    assert [r.timestamps for r in requests] == [TIMES[0:2], TIMES[2:4], TIMES[4:6], TIMES[6:8]]
    assert plain["text"].count("Segment ") == 4


def _frames_row():
    return {"frames_key": "f" * 32, "video_id": "v", "frame_spec": "uniform:8", "timestamps": list(TIMES),
            "path": "unused.npy", "error": None}


def _dataset_with_boundaries():
    from capeval.engine.sweep.config import DatasetSpec
    from capeval.engine.sweep.datasets import LoadedDataset

    rows = [{"benchmark": "lvcap", "task": "scene", "item_id": "a/s1/q1", "video_id": "a",
             "extra": json.dumps({"scene": 1, "scene_boundaries": [1.5, 3.6], "shot_boundaries": [1.5, 2, 3.6]})},
            {"benchmark": "lvcap", "task": "events", "item_id": "b/events", "video_id": "b",
             "extra": json.dumps({"shot_boundaries": [2.25]})},
            {"benchmark": "lvcap", "task": "events", "item_id": "c/events", "video_id": "c", "extra": "{}"}]
    return LoadedDataset(DatasetSpec("gt", "items"), conform(pa.Table.from_pylist(rows), ITEMS), {}, "d")


def test_caption_keys_and_tasks_carry_boundaries_of_segmental_prompts_only(tmp_path):
    from capeval.engine.sweep.captioning import caption_key_at, caption_task, video_caption_key
    from capeval.engine.sweep.config import ComponentSpec
    from capeval.engine.sweep.grid import CaptionCell
    from capeval.engine.sweep.run import SweepRun

    cap, rev = ComponentSpec("local"), "pixelstats-1"
    row = _frames_row()
    seg, plain = "lvcap_segment", "capquiz_standard"
    assert get_prompt(seg).segmental and not get_prompt(plain).segmental
    # a video without boundaries keeps the key it always had; its own boundaries make another caption
    assert caption_key_at(row, cap, rev, seg) == caption_key_at(row, cap, rev, seg, None, ())
    with_b = caption_key_at(row, cap, rev, seg, None, (1.5, 3.6))
    assert with_b != caption_key_at(row, cap, rev, seg) != caption_key_at(row, cap, rev, seg, None, (2.0,))
    # prompts that are not segmental ignore them (their captions are of the whole video)
    assert caption_key_at(row, cap, rev, plain, None, (1.5, 3.6)) == caption_key_at(row, cap, rev, plain)
    # a sweep's key of video "a" follows the scene cuts its items give (only what the key reads is set up here)
    data = _dataset_with_boundaries()
    run = SweepRun(None, tmp_path, None, datasets={"gt": data}, captioner_revisions={"local": rev},
                   judge_revisions={})
    cell, plain_cell = (CaptionCell(data.spec, cap, p, "uniform:8") for p in (seg, plain))
    assert video_caption_key(run, {**row, "video_id": "a"}, cell) == caption_key_at(row, cap, rev, seg, None,
                                                                                   (1.5, 3.6))
    assert video_caption_key(run, {**row, "video_id": "c"}, cell) == caption_key_at(row, cap, rev, seg)
    task = caption_task(row, cell, with_b, None, (1.5, 3.6))
    assert task.boundaries == (1.5, 3.6) and task.caption_key == with_b and task.segments == 4
    assert caption_task(row, plain_cell, "k", None, (1.5, 3.6)).boundaries == ()


def test_a_loaded_dataset_gives_each_video_the_boundaries_of_its_items():
    assert _dataset_with_boundaries().scene_boundaries == {"a": (1.5, 3.6), "b": (2.25,)}
