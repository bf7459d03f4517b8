"""`capeval construct lvcap` with a real chat model on one step: SmolLM2-135M-Instruct (adapters/smollm2.py) on
vLLM's CPU engine extracts every scene's events from capeval's strict prompt (a JSON array, schema-constrained);
shots, shot captions, narratives and questions come from the local components. Its events are whatever a 135M model
writes, so the test checks what the pipeline does with them: each scene's reply parsed into strings under the
request key it was cached under, and the video's events item holding the scenes' events in order."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from _scene_videos import make_cut_video
from _smollm2 import smollm2_judge_options

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # one engine start (~1-2 min on 2 cores)
pytest.importorskip("capeval.adapters.smollm2")


def test_smollm2_extracts_the_events_of_every_scene(tmp_path):
    from capeval.engine.cli import main

    root = tmp_path / "videos"
    root.mkdir()
    make_cut_video(root / "clip.mp4", [("red", 30), ("blue", 30)], fps=24)
    out = tmp_path / "gt"
    with smollm2_judge_options("smol") as smol:
        args = ["construct", "lvcap", "--videos", str(root), "--out", str(out), "--judge", "local",
                "--step-judge", "events=vllm@smol", *smol, "--questions", "4", "--no-progress"]
        assert main(args) == 0
    summary = json.loads((out / "construct.json").read_text())
    assert summary["judges"]["smol"]["name"] == "smollm2-135m-instruct" and summary["roles"]["events"] == ["smol"]
    assert summary["steps"]["events"]["asks"] == 2 and summary["steps"]["events"]["failed"] == 0
    record = [r for r in pq.read_table(out / "record.parquet").to_pylist() if r["step"] == "events"]
    per_scene = [r for r in record if r["item_id"] != "clip/events"]
    assert [r["item_id"] for r in per_scene] == ["clip/scene1", "clip/scene2"]
    scene_events = []
    for r in per_scene:  # the model's own events, parsed into a list of strings and kept with their key
        events = json.loads(r["output"])
        assert r["kept"] and r["request_key"] and isinstance(events, list)
        assert all(isinstance(e, str) and e.strip() for e in events) and r["reason"] == f"{len(events)} events"
        scene_events += events
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    (events_item,) = [i for i in items if i["task"] == "events"]
    assert json.loads(events_item["annotation"]) == scene_events  # scene by scene, in order

