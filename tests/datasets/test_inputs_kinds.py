"""Dataset kinds on real files: the release layouts in ../shared/data plus media the tests make with PyAV and
Pillow; images and videos get their own caption prompt (issue 9 done-when 3)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from capeval.engine.datasets.synthetic_videos import make_video
from capeval.engine.datasets.registry import load, validate
from capeval.engine.registry import lookup, names
from capeval.engine.errors import UsageError

IMAGE_TASKS, VIDEO_TASKS = ("scene", "OCR"), ("event", "camera_movement")


def _picture(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(path)


def capability_release(root: Path, shared: Path, per_task: int = 2) -> dict[str, dict]:
    """A CAPability-layout release under root: the first records of two image and two video tasks (real
    annotations), with a JPEG/PNG or an H.264 file at each record's file_path."""
    records = {}
    for i, task in enumerate(IMAGE_TASKS + VIDEO_TASKS):
        lines = (shared / "capability" / "annotations" / f"{task}.jsonl").read_text().splitlines()[:per_task]
        (root / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "annotations" / f"{task}.jsonl").write_text("\n".join(lines) + "\n")
        for k, line in enumerate(lines):
            rec = json.loads(line)
            media = root / rec["file_path"]
            if rec["data_type"] == "image":
                _picture(media, 10 * i + k)
            else:
                media.parent.mkdir(parents=True, exist_ok=True)
                make_video(media, codec="libx264", seconds=1.0, fps=8, size=(64, 48), seed=10 * i + k)
            records[rec["file_id"]] = rec
    return records


def test_every_kind_is_registered_with_documented_params():
    assert set(names("dataset_kind")) >= {"capability", "vidcapbench", "dream1k", "vatex_eval", "videos", "items",
                                 "synthetic"}
    for name in names("dataset_kind"):
        kind = lookup("dataset_kind", name)
        assert kind.doc and all(p.doc for p in kind.params)
    known = ", ".join(names("dataset_kind"))
    assert validate("nosuch", {}) == [f"kind: unknown dataset kind 'nosuch'; registered: {known}"]


def test_capability_layout_images_and_videos_with_prompts_per_media_type(tmp_path, shared_data):
    from capeval.engine.frames.decode import decode_frames
    from capeval.engine.frames.sampling import FrameSpec
    from capeval.engine.packs import load_pack
    from capeval.engine.prompts_library import get_prompt, prompt_from_entry, register_prompts, texts_for_media
    from capeval.engine.sweep.config import DatasetSpec
    from capeval.engine.sweep.datasets import load_dataset

    records = capability_release(tmp_path / "release", shared_data)
    spec = DatasetSpec("cap", "capability", params={"path": "release/annotations"})
    data = load_dataset(spec, out_dir=tmp_path / "out", sweep_dir=tmp_path)
    assert data.items.num_rows == 8 and set(data.items.column("task").to_pylist()) == set(IMAGE_TASKS + VIDEO_TASKS)
    assert data.videos == {fid: str(tmp_path / "release" / r["file_path"]) for fid, r in records.items()}
    types = data.media_types
    assert sorted(types.values()) == ["image"] * 4 + ["video"] * 4
    assert all(types[fid] == r["data_type"] for fid, r in records.items())
    # the official prompts, read from the pack at run time (never part of capeval), chosen per media type
    pack = shared_data.parent / "protocols" / "capability.toml"
    official = prompt_from_entry({"id": "cap-official", "pack": str(pack), "video": "caption/video",
                                  "image": "caption/image"}, tmp_path)
    register_prompts({official.id: official})
    chosen = texts_for_media("cap-official", types)
    p = load_pack(pack)
    for fid, text in chosen.items():
        want = p.prompt("caption/image" if types[fid] == "image" else "caption/video").user  # verbatim
        assert text == want
    builtin = texts_for_media("detailed", types)
    assert {builtin[f] for f in types if types[f] == "image"} == {get_prompt("detailed").image_text}
    assert {builtin[f] for f in types if types[f] == "video"} == {get_prompt("detailed").text}
    # images decode as one frame, videos as the spec asks
    for fid, path in data.videos.items():
        r = decode_frames(path, FrameSpec.parse("uniform:4"))
        assert r.frames.shape[0] == (1 if types[fid] == "image" else 4) and r.media_type == types[fid]
    # a missing media file is an error before any work; a task filter and limit apply
    Path(data.videos[next(iter(records))]).unlink()
    with pytest.raises(UsageError, match=r"1 of 8 media files not found"):
        load_dataset(spec, out_dir=tmp_path / "out", sweep_dir=tmp_path)
    only = DatasetSpec("cap", "capability", limit=1, params={"path": "release/annotations", "tasks": ["event"]})
    assert load_dataset(only, out_dir=tmp_path, sweep_dir=tmp_path).items.num_rows == 1


def test_capability_release_files_in_place(shared_data):
    d = load("capability", {"path": str(shared_data / "capability" / "annotations")})
    assert d.items.num_rows == 11631 and len(d.media) == 10643  # event/action share their videos
    assert all(p.startswith(str(shared_data / "capability")) for p in d.media.values())
    assert validate("capability", {"path": str(shared_data / "capability" / "annotations"), "tasks": ["colour"]}) \
        == ["tasks: unknown task(s) ['colour']; tasks: " + ", ".join(__import__(
            "capeval.engine.protocols.capability.codes", fromlist=["TASKS"]).TASKS)]


def test_dream1k_with_videos(tmp_path, shared_data):
    src = shared_data / "dream1k" / "DREAM-1k.jsonl"
    vids = [str(json.loads(line)["vid"]) for line in src.read_text().splitlines()[:2]]
    for i, v in enumerate(vids):
        make_video(tmp_path / "videos" / f"{v}.mp4", codec="libx264", seconds=1.0, fps=8, size=(64, 48), seed=i)
    d = load("dream1k", {"path": str(src), "media_root": str(tmp_path / "videos")})
    assert d.items.num_rows == 1000 and all(Path(d.media[v]).is_file() for v in vids)
    events = load("dream1k", {"path": str(src), "unit": "events"})
    assert events.items.num_rows == 6298
    assert validate("dream1k", {"path": str(src), "unit": "scenes"}) == \
        ["unit: expected 'clips' or 'events', got 'scenes'"]


def test_vidcapbench_qa_file_with_media(tmp_path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"video_dir": "clip1.mp4", "QA_pairs": [
        {"question": "What moves?", "answer": "a ball", "sub_category": "object motion"},
        {"question": "Where?", "answer": "a park", "sub_category": "background"}]}) + "\n")
    make_video(tmp_path / "media" / "clip1.mp4", codec="libx264", seconds=1.0, fps=8, size=(64, 48), seed=0)
    d = load("vidcapbench", {"path": str(qa), "media_root": str(tmp_path / "media")})
    assert d.items.num_rows == 2 and d.media == {"clip1.mp4": str(tmp_path / "media" / "clip1.mp4")}


def test_vatex_eval_brings_its_captions(shared_data):
    d = load("vatex_eval", {"path": str(shared_data / "vatex_eval")})
    assert d.items.num_rows == 18000 and d.captions is not None and d.captions.num_rows == 18000
    assert len(d.media) == 3000


def test_items_kind_csv_with_relative_media(tmp_path):
    _picture(tmp_path / "data" / "media" / "p.png", 1)
    (tmp_path / "data" / "items.csv").write_text("item_id,media_path,question\nq1,media/p.png,What is shown?\n")
    d = load("items", {"path": "data/items.csv"}, base_dir=tmp_path)
    assert d.media == {"media/p.png": str(tmp_path / "data" / "media" / "p.png")}
    assert d.items.column("media_type").to_pylist() == ["image"]
    assert validate("items", {"path": "nope.csv"}, tmp_path) == [f"path: file not found: {tmp_path / 'nope.csv'}"]


def test_capeval_list_shows_kinds_prompts_and_backend_params(capsys):
    from capeval.engine.cli import main

    assert main(["list", "kinds"]) == 0
    out = capsys.readouterr().out
    for name in names("dataset_kind"):
        assert f"\n  {name} " in out
    assert "media_root" in out and "limit = N" in out
    assert main(["list", "prompts"]) == 0
    out = capsys.readouterr().out
    assert "detailed" in out and "image+video" in out
    assert main(["list", "judges"]) == 0
    out = capsys.readouterr().out
    assert "replies (required)" in out and "model (default 'gpt-4-turbo')" in out
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(title in out for title in ("protocols:", "dataset kinds", "caption prompts", "judges", "captioners"))
