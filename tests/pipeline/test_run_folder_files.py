"""A run folder's file count grows far slower than its videos (issue 21, item 3 and its Done-when bullet): a
caption-and-judge sweep of 2,000 synthetic videos leaves at most 200 files outside the generated videos.

The 2,000-video run is a scale run (about 3.5 minutes on 2 cores): the suite deselects it (tests/conftest.py) and
`bash scripts/test.sh --scale -m scale` runs it (docs/bench.md, "Scale runs"). The suite runs the same sweep on 200
videos with the same ratio, at most one file per 10 videos (20): the count does not depend on the number of videos
(14 files at 50 and at 200 videos), and the per-video files of before (~3.25 per video) would be ~650.

Before group commit the same sweep left one frames-index Parquet per video and one caption segment per caption
batch (6,507 files for 2,000 videos with the .npy frame cache). Now the captions and the frames index are
group-committed stores compacted at the end of the run (engine/store/segments.py), verdicts and metrics are one
named segment per cell, the judgment cache is one SQLite database, and the frame cache is append-only shards
(engine/frames/cache.py): the count includes the frame cache.

The configuration is the quickest realistic one: tiny videos (0.2 s at 160x120), one frame per video, the local
pixel-statistics captioner and the local judge, no GPU and no network."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from _sweeps import sweep_toml
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

ITEMS_PER_VIDEO = 4
#: at most one file outside the videos per 10 videos: issue 21's 200 files for 2,000 videos
VIDEOS_PER_FILE = 10


def run_folder_files(out: Path) -> dict[str, int]:
    """Files per top-level entry of a run folder, the generated videos (the user's media) left out."""
    counts: dict[str, int] = {}
    for p in out.rglob("*"):
        if p.is_file():
            top = p.relative_to(out).parts[0]
            if top != "videos":
                counts[top if p.parent != out else "."] = counts.get(top if p.parent != out else ".", 0) + 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("n_videos", [200, pytest.param(2000, marks=pytest.mark.scale)])
def test_a_run_folder_holds_at_most_one_file_per_10_videos(tmp_path, ray_local, n_videos):
    sweep = tmp_path / "scale.toml"
    sweep.write_text(sweep_toml("scale", prompts=("brief",), frames=("uniform:1",), n_videos=n_videos, duration_s=0.2,
                                options={"n_resamples": 20, "judge_batch_size": 256}))
    t0 = time.perf_counter()
    result = run_sweep(load_sweep(sweep), tmp_path / "out", progress=False, log=lambda m: None)
    wall = time.perf_counter() - t0
    assert result.exit_code == 0 and result.account.by_status.get("ok") == n_videos * ITEMS_PER_VIDEO
    counts = run_folder_files(tmp_path / "out")
    print(f"\n{n_videos} videos: {wall:.1f} s, files outside videos/: {sum(counts.values())} {counts}")
    assert sum(counts.values()) <= n_videos // VIDEOS_PER_FILE, counts
    assert counts["captions"] <= 2 and counts["frames_index"] <= 2, counts  # compacted at the end of the run
    # the generated videos are the user's media: one .mp4 and its ground-truth .json each, nothing else in there
    assert len(list((tmp_path / "out" / "videos").rglob("*"))) <= 2 * n_videos + 2
