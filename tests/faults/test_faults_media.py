"""Damaged and duplicate media through a real sweep (issue 8, findings 1 and 7): every item yields its own verdict
row; items on videos that cannot be decoded are counted in n_no_verdict as `bad_media`, reported with their ids,
and the run exits 3; items on byte-identical videos share one decode and one caption but keep their own rows.
A frame cache that cannot be written (a real full file system) is a retryable failure: the cell stays incomplete
and the rerun completes it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from _faults_support import assert_no_duplicates, read_store, sweep, sweep_text
from capeval.engine import exitcodes

DAMAGED = ("zero_bytes", "not_a_video", "truncated", "corrupt_packets")


def _item(video_id: str, path: Path) -> dict:
    return {"benchmark": "capquiz", "task": "counting", "item_id": f"{video_id}/q", "video_id": video_id,
            "media_path": str(path), "media_type": "video", "annotation": "How many shapes are visible?",
            "options": ["1", "2", "3", "4", "5"], "answer": "2", "category": "counting"}


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict:
    from capeval.engine.datasets.synthetic_videos import make_broken_videos, make_video

    d = tmp_path_factory.mktemp("media")
    good = {}
    for i in range(3):
        good[f"good{i}"] = d / f"good{i}.mp4"
        make_video(good[f"good{i}"], codec="h264", seconds=1.0, fps=12, size=(96, 64), seed=40 + i)
    twin = d / "twin0.mp4"
    make_video(twin, codec="h264", seconds=1.0, fps=12, size=(96, 64), seed=50)
    twins = {"twin0": twin}
    for i in range(1, 4):  # byte-identical copies under other names: a dataset with duplicate clips
        twins[f"twin{i}"] = d / f"twin{i}.mp4"
        shutil.copyfile(twin, twins[f"twin{i}"])
    broken = make_broken_videos(d / "broken", size=(96, 64), large=False)
    return {"good": good, "twins": twins, "damaged": {k: broken[k] for k in DAMAGED}}


def _dataset(tmp_path: Path, videos: dict) -> dict:
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(_item(v, p)) + "\n" for v, p in videos.items()))
    return {"name": "clips", "kind": "items", "path": str(items)}


def test_damaged_and_identical_videos_are_each_accounted_for(media, tmp_path, sweep_file):
    videos = {**media["good"], **media["twins"], **media["damaged"]}
    # uniform:5 reaches the damaged middle of corrupt_packets (2 frames would skip it and decode fine)
    path = sweep_file(sweep_text(dataset=_dataset(tmp_path, videos), frames=("uniform:5",)))
    out = tmp_path / "out"
    run = sweep(path, out)
    assert run.returncode == exitcodes.FAILURES, run
    verdicts = read_store(out / "verdicts")
    # one row per item, the four byte-identical videos included
    assert sorted(verdicts["item_id"]) == sorted(f"{v}/q" for v in videos)
    bad = verdicts.filter(pl.col("item_status") == "bad_media")
    assert sorted(bad["video_id"]) == sorted(DAMAGED)
    assert (bad["verdict"] == -1).all() and not bad["retryable"].any()
    assert bad["error"].str.starts_with("bad media").all()
    assert (verdicts.filter(pl.col("item_status") != "bad_media")["item_status"] == "ok").all()
    overall = pl.read_parquet(out / "results.parquet").filter(pl.col("question_type") == "all",
                                                              pl.col("family") == "all", pl.col("metric") == "CapR")
    n, n_no_verdict = overall.select("n", "n_no_verdict").row(0)
    assert (n + n_no_verdict, n_no_verdict) == (len(videos), len(DAMAGED))
    assert set(overall["cell_status"]) == {"complete"}  # permanent failures finish the cell
    # the summary names the status, the reasons and the items to look at
    assert f"bad_media {len(DAMAGED)}" in run.stdout
    for vid in DAMAGED:
        assert f"{vid}/q" in run.stdout
    assert "completed with failures" in run.stderr
    # shared work: the twins were decoded and captioned once (one caption per distinct content)
    index = read_store(out / "frames_index")
    twins = index.filter(pl.col("video_id").str.starts_with("twin"))
    assert twins.height == 4 and twins["frames_key"].n_unique() == 1
    assert read_store(out / "captions").height == len(media["good"]) + 1
    assert_no_duplicates(out)

    again = sweep(path, out)  # finished cell: nothing redone, same answer and exit code
    assert again.returncode == exitcodes.FAILURES, again
    assert "1 cached (skipped), 0 to run" in again.stderr
    assert pl.read_parquet(out / "results.parquet").equals(pl.read_parquet(out / "results.parquet"))


@pytest.mark.slow
def test_full_frame_cache_is_retryable_and_the_rerun_completes(media, tmp_path, sweep_file):
    """The frame cache on a 4 KiB tmpfs (one page, less than one video's JPEG frames; mounted in a private mount
    namespace): every frame write fails for want of space. Nothing is lost: the items are `io_error` (retryable), the cell is incomplete, exit 3; the rerun
    without the full disk completes the cell with every item judged."""
    if not shutil.which("unshare"):
        pytest.skip("needs unshare(1) to mount a small tmpfs")
    videos = dict(media["good"])
    path = sweep_file(sweep_text(dataset=_dataset(tmp_path, videos)))
    out = tmp_path / "out"
    (out / "frames").mkdir(parents=True)
    mount = ["unshare", "-r", "-m", "sh", "-c", f'mount -t tmpfs -o size=4k tmpfs "{out / "frames"}" && exec "$@"',
             "sh"]
    probe = __import__("subprocess").run(mount + ["true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {probe.stderr.decode()[-200:]}")
    first = sweep(path, out, prefix=mount)
    assert first.returncode == exitcodes.FAILURES, first
    verdicts = read_store(out / "verdicts")
    assert verdicts.height == len(videos)
    assert set(verdicts["item_status"]) == {"io_error"} and verdicts["retryable"].all()
    assert verdicts["error"].str.contains("no space left on the device").all(), verdicts["error"].to_list()
    assert set(read_store(out / "metrics")["cell_status"]) == {"incomplete"}
    assert "io_error" in first.stdout and "retryable" in first.stdout

    second = sweep(path, out)
    assert second.returncode == exitcodes.OK, second
    assert "1 to run (1 incomplete" in second.stderr
    verdicts = read_store(out / "verdicts")
    assert verdicts.height == len(videos) and set(verdicts["item_status"]) == {"ok"}
    assert set(read_store(out / "metrics")["cell_status"]) == {"complete"}
    assert_no_duplicates(out)
