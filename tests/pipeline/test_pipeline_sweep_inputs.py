"""Sweeps over inputs people have (issue 9, runner side): a folder of mixed images and videos captioned per media
type and judged by VC-Inspector with judge frames decoded at its own spec; a caption-only sweep; a cell whose
captions come from a file (no captioning), where an item the file does not caption stays a row (`no_caption`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep


@pytest.fixture(scope="module")
def media_folder(tmp_path_factory) -> Path:
    from PIL import Image

    from capeval.engine.datasets.synthetic_videos import make_video

    d = tmp_path_factory.mktemp("mixed")
    make_video(d / "clip_a.mp4", codec="h264", seconds=1.0, fps=12, size=(96, 64), seed=3)
    make_video(d / "clip_b.mp4", codec="h264", seconds=1.0, fps=12, size=(96, 64), seed=4)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(d / "still.png")
    return d


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def test_mixed_folder_captioned_per_media_type_and_judged_by_vcinspector(media_folder, tmp_path, ray_local):
    path = _write(tmp_path, f"""
name = "mixed"
prompts = ["brief", "detailed"]
frames = ["uniform:2"]
[[datasets]]
name = "folder"
kind = "videos"
path = "{media_folder}"
[[captioners]]
name = "local"
[[protocols]]
name = "vcinspector"
params = {{ judge_frames = "linspace:3" }}
[[judges]]
name = "local"
[options]
n_resamples = 20
""")
    res = run_sweep(load_sweep(path), tmp_path / "out", progress=False, log=lambda m: None)
    verdicts = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "verdicts").glob("*.parquet")])
    assert verdicts.height == 2 * 3  # 2 prompts x 3 media items, every one judged
    assert set(verdicts["item_status"]) == {"ok"}, verdicts.select("video_id", "error").to_dicts()
    index = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "frames_index").glob("*.parquet")])
    judge_frames = index.filter(pl.col("frame_spec") == "linspace:3")
    assert judge_frames.height == 3  # decoded for the judge at its own spec, apart from the captions' frames
    captions = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "captions").glob("*.parquet")])
    assert captions.height == 2 * 3
    # the still image was captioned with the prompt's image variant: its caption key is the one of that text
    from capeval.engine.sweep.captioning import caption_key_at
    from capeval.engine.sweep.runner import component_revision

    config = load_sweep(path)
    cap = config.captioners[0]
    rev = component_revision("captioner", cap)
    row = index.filter((pl.col("video_id") == "still") & (pl.col("frame_spec") == "uniform:2")).to_dicts()[0]
    keys = set(captions["caption_key"])
    assert caption_key_at(row, cap, rev, "brief", "image") in keys
    assert caption_key_at(row, cap, rev, "brief", "video") not in keys
    assert res.exit_code == 0 and res.account.items == 6


def test_caption_only_sweep_writes_the_captions(media_folder, tmp_path, ray_local):
    path = _write(tmp_path, f"""
name = "caponly"
prompts = ["brief"]
frames = ["uniform:2"]
[[datasets]]
name = "folder"
kind = "videos"
path = "{media_folder}"
[[captioners]]
name = "local"
""")
    res = run_sweep(load_sweep(path), tmp_path / "out", progress=False, log=lambda m: None)
    table = pl.read_parquet(tmp_path / "out" / "captions.parquet")
    assert sorted(table["video_id"]) == ["clip_a", "clip_b", "still"]
    assert table["text"].is_not_null().all() and set(table["item_status"]) == {"ok"}
    assert res.exit_code == 0


def test_captions_from_a_file_are_judged_without_captioning(tmp_path):
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    with items.open("w") as f:
        for v in range(3):
            f.write(json.dumps({"item_id": f"v{v}/q", "video_id": f"v{v}", "task": "counting",
                                "annotation": "How many shapes are visible?", "options": ["1", "2", "3", "4", "5"],
                                "answer": "2", "category": "counting", "benchmark": "capquiz"}) + "\n")
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": f"{v + 1} shapes move."}) + "\n"
                                for v in range(2)))  # v2 has no caption in the file
    path = _write(tmp_path, f"""
name = "filecaps"
[[datasets]]
name = "quiz"
kind = "items"
path = "{items}"
[[captions]]
path = "{captions}"
captioner = "mymodel"
[[protocols]]
name = "capquiz"
[[judges]]
name = "local"
[options]
n_resamples = 20
""")
    res = run_sweep(load_sweep(path), tmp_path / "out", progress=False, log=lambda m: None)
    verdicts = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "verdicts").glob("*.parquet")])
    assert sorted(verdicts["item_id"]) == ["v0/q", "v1/q", "v2/q"]
    missing = verdicts.filter(pl.col("item_id") == "v2/q")
    assert missing["item_status"].to_list() == ["no_caption"] and not missing["retryable"][0]
    assert set(res.results["captioner"]) == {"mymodel"}
    assert res.exit_code == 3 and res.caption_stats.get("captioned", 0) == 0
