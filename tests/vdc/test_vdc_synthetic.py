"""The `vdc_synthetic` dataset kind: real H.264 videos (make_video, decoded back with PyAV here) with VDC-style QA
pairs for each of the five kinds whose answers are the videos' ground truth, in the `vdc` kind's item shape."""

from __future__ import annotations

import json
from pathlib import Path

import av

from capeval.engine.datasets.registry import load, validate
from capeval.engine.protocols.vdc.release import KINDS
from capeval.engine.protocols.vdc.synthetic_kind import direction


def _by_id(items) -> dict[str, dict]:
    return {r["item_id"]: r for r in items.to_pylist()}


def test_real_videos_with_questions_of_every_kind_answered_by_the_ground_truth(tmp_path):
    loaded = load("vdc_synthetic", {"n_videos": 3, "seed": 4, "duration_s": 1.0}, out_dir=tmp_path, name="syn")
    assert sorted(loaded.media) == ["syn-000", "syn-001", "syn-002"]
    rows = loaded.items.to_pylist()
    for video_id, path in loaded.media.items():
        with av.open(path) as container:
            stream = container.streams.video[0]
            assert stream.codec_context.name == "h264"
            assert sum(1 for _ in container.decode(stream)) == 12  # 1 s at 12 fps
        truth = json.loads(Path(f"{path}.json").read_text())
        mine = [r for r in rows if r["video_id"] == video_id]
        assert {r["task"] for r in mine} == set(KINDS)
        assert all(r["media_path"] == path and r["media_type"] == "video" and r["benchmark"] == "vdc" for r in mine)
        for kind in KINDS:  # item ids and extra as the `vdc` kind gives them: position in the video's QA list
            qa = [r for r in mine if r["task"] == kind]
            assert [r["item_id"] for r in qa] == [f"{kind}/{video_id}/{n:02d}" for n in range(len(qa))]
            assert [json.loads(r["extra"])["qa_index"] for r in qa] == list(range(len(qa)))
            assert {json.loads(r["extra"])["n_questions"] for r in qa} == {len(qa)}
            assert all(r["annotation"] and r["answer"] and r["category"] for r in qa)
        by_id = _by_id(loaded.items)
        main = truth["shapes"][0]
        assert by_id[f"short/{video_id}/02"]["answer"] == truth["background"]
        assert by_id[f"background/{video_id}/00"]["answer"] == truth["background"]
        assert by_id[f"main_object/{video_id}/00"]["answer"] == f"a {main['color']} {main['shape']}"
        assert by_id[f"main_object/{video_id}/01"]["answer"] == main["shape"]
        assert by_id[f"main_object/{video_id}/02"]["answer"] == main["color"]
        for r in mine:  # every direction question names a shape of the video and its ground-truth heading
            if r["task"] == "detailed" and r["category"] == "action":
                name = r["annotation"].split("the ", 1)[1].split(" move")[0]
                shape = next(s for s in truth["shapes"] if f"{s['color']} {s['shape']}" == name)
                assert truth["counts"][name] == 1
                assert r["answer"] == direction(shape["velocity"], (truth["width"], truth["height"]))
    assert len({r["item_id"] for r in rows}) == len(rows)


def test_kinds_subset_reuse_and_regeneration(tmp_path):
    params = {"n_videos": 2, "kinds": ["camera", "main_object"]}
    first = load("vdc_synthetic", params, out_dir=tmp_path, name="s")
    assert set(first.items.column("task").to_pylist()) == {"camera", "main_object"}
    video = Path(first.media["s-000"])
    stamp = video.stat().st_mtime_ns
    again = load("vdc_synthetic", params, out_dir=tmp_path, name="s")
    assert again.items.equals(first.items) and video.stat().st_mtime_ns == stamp  # reused, not re-encoded
    other = load("vdc_synthetic", {**params, "seed": 1}, out_dir=tmp_path, name="s")  # the sidecar says seed 0
    assert json.loads(Path(f"{video}.json").read_text())["seed"] == 1000
    assert other.items.column("answer").to_pylist() != first.items.column("answer").to_pylist()


def test_params_are_checked(tmp_path):
    assert validate("vdc_synthetic", {"n_videos": 0}) == ["n_videos: must be at least 1, got 0"]
    assert validate("vdc_synthetic", {"kinds": ["long"]}) == [
        "kinds: unknown kind(s) 'long' (choose from short, detailed, background, main_object, camera)"]
    assert validate("vdc_synthetic", {"duration_s": -1}) == ["duration_s: must be a positive number, got -1"]
    assert validate("vdc_synthetic", {"path": "x"})[0].startswith("path: unknown key 'path'")
