"""Issue 9, done-when 3: a CAPability-layout release with image and video items (real annotations of all 13 tasks,
media made here with Pillow and PyAV) is captioned per media type -- the official captioning prompts read from the
benchmark's pack at run time -- and scored over all 13 tasks plus their average."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from capeval.engine.datasets.synthetic_videos import make_video
from capeval.engine.protocols.capability.codes import TASKS
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep


def _release(root: Path, shared: Path) -> dict[str, str]:
    """The first record of each of the 13 task files, with its image or video at the record's file_path."""
    media_type = {}
    for i, task in enumerate(TASKS):
        line = (shared / "capability" / "annotations" / f"{task}.jsonl").read_text().splitlines()[0]
        (root / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "annotations" / f"{task}.jsonl").write_text(line + "\n")
        rec = json.loads(line)
        media = root / rec["file_path"]
        media.parent.mkdir(parents=True, exist_ok=True)
        if rec["data_type"] == "image" and not media.exists():
            rgb = np.random.default_rng(i).integers(0, 255, (48, 64, 3), dtype=np.uint8)
            Image.fromarray(rgb).save(media, format="JPEG" if media.suffix.lower() in (".jpg", ".jpeg") else None)
        elif not media.exists():
            make_video(media, codec="libx264", seconds=1.0, fps=8, size=(64, 48), seed=i)
        media_type[rec["file_id"]] = rec["data_type"]
    return media_type


def test_capability_release_captioned_per_media_type_and_scored_over_13_tasks(tmp_path, shared_data, ray_local):
    pack = shared_data.parent / "protocols" / "capability.toml"
    if not pack.is_file():
        pytest.skip("the official CAPability pack is not beside the project")
    media_type = _release(tmp_path / "release", shared_data)
    assert set(media_type.values()) == {"image", "video"}
    path = tmp_path / "sweep.toml"
    path.write_text(f"""
name = "capability-release-test"
frames = ["uniform:2"]
[[prompts]]
id = "capability-official"
pack = "{pack}"
video = "caption/video"
image = "caption/image"
[[datasets]]
name = "capability"
kind = "capability"
path = "release/annotations"
[[captioners]]
name = "local"
[[protocols]]
name = "capability"
[[judges]]
name = "local"
[options]
n_resamples = 20
""")
    res = run_sweep(load_sweep(path), tmp_path / "out", progress=False, log=lambda m: None)
    out = tmp_path / "out"
    verdicts = pl.concat([pl.read_parquet(p) for p in (out / "verdicts").glob("*.parquet")])
    assert set(verdicts["task"]) == set(TASKS)
    assert set(verdicts["item_status"]) == {"ok"}, verdicts.select("task", "item_status", "error").to_dicts()

    # one caption per media file, each made with the pack's prompt for its media type
    from capeval.engine.sweep.captioning import caption_key_at
    from capeval.engine.sweep.runner import component_revision

    config = load_sweep(path)
    cap = config.captioners[0]
    rev = component_revision("captioner", cap)
    index = pl.concat([pl.read_parquet(p) for p in (out / "frames_index").glob("*.parquet")])
    keys = set(pl.concat([pl.read_parquet(p) for p in (out / "captions").glob("*.parquet")])["caption_key"])
    for row in index.filter(pl.col("frame_spec") == "uniform:2").to_dicts():
        mine, other = media_type[row["video_id"]], {"image": "video", "video": "image"}[media_type[row["video_id"]]]
        assert caption_key_at(row, cap, rev, "capability-official", mine) in keys
        assert caption_key_at(row, cap, rev, "capability-official", other) not in keys

    # metrics for every task and the 13-task average, nothing left without a verdict
    results = res.results
    tasks = set(results["task"].drop_nulls()) if "task" in results.columns else set()
    assert set(TASKS) <= tasks, sorted(tasks)
    assert {"precision", "recall", "f1", "hit_rate"} <= set(results["metric"])
    assert tasks - set(TASKS), "the 13-task average row is missing"
    assert int(results["n_no_verdict"].max()) == 0
    assert res.exit_code == 0
