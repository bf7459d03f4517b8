"""The items `capeval construct lvcap` writes, swept with the segmental caption prompt: each video is captioned scene
by scene at its own boundaries (the items' extra.scene_boundaries), not in four equal parts. Real Ray, real H.264
clips with hard cuts, the local pixel-statistics captioner (which names each segment's background colour) and the
local judge."""

from __future__ import annotations

import polars as pl
import pytest
from _scene_videos import make_cut_video
from _sweeps import sweep_toml

from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

pytestmark = pytest.mark.slow  # a construction run and a Ray sweep (~1 min on 2 cores)
FPS = 24
# unequal scenes: four equal parts of these videos would mix colours within a segment
VIDEOS = {"alpha": [("red", 60), ("green", 18), ("blue", 18)], "beta": [("yellow", 30), ("purple", 66)]}


def test_segmental_captions_follow_each_videos_scenes(tmp_path, ray_local):
    from capeval.engine.cli import main

    root = tmp_path / "videos"
    root.mkdir()
    for vid, shots in VIDEOS.items():
        make_cut_video(root / f"{vid}.mp4", shots, fps=FPS)
    gt = tmp_path / "gt"
    assert main(["construct", "lvcap", "--videos", str(root), "--judge", "local", "--questions", "2", "--out",
                 str(gt), "--no-progress"]) == 0
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(sweep_toml("segmental", prompts=("lvcap_segment",), frames=("fps:6",),
                                dataset={"name": "gt", "kind": "items", "path": str(gt / "items.jsonl")},
                                protocols=("lvcap",)))
    result = run_sweep(load_sweep(sweep), tmp_path / "out", progress=False, log=lambda m: None)
    assert result.exit_code == 0
    captions = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "captions").rglob("*.parquet")])
    texts = dict(zip(captions["video_id"], captions["text"]))
    for vid, shots in VIDEOS.items():
        segments = texts[vid].split("\n")
        assert len(segments) == len(shots), texts[vid]  # one segment per scene, not four
        for k, ((colour, _), segment) in enumerate(zip(shots, segments), start=1):
            assert segment.startswith(f"Segment {k}: ") and f"on a {colour} background" in segment, segment
