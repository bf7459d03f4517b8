"""A damaged frame-cache index through a real sweep (issue 26, item 3): an `.idx` line whose length claims more
bytes than its shard holds once made the caption worker allocate them (MemoryError), a retryable caption failure
that came back on every rerun. A damaged line is a missing entry: the frames are decoded again and captioned."""

from __future__ import annotations

import json

import polars as pl

from _faults_support import read_store, sweep, synthetic
from _sweeps import sweep_toml
from capeval.engine import exitcodes


def _caption_only(prompts) -> str:
    """No protocols or judges: the sweep only captions (engine/sweep/caption_only.py)."""
    return sweep_toml("frame-index", prompts=prompts, frames=("uniform:2",), dataset=synthetic(2, duration_s=0.5),
                      protocols=(), judges=(), options={"batch_size": 1})


def test_a_damaged_index_entry_is_decoded_again_not_a_caption_failure(tmp_path, sweep_file):
    out = tmp_path / "out"
    first = sweep(sweep_file(_caption_only(("brief",))), out)
    assert first.returncode == exitcodes.OK, first
    lines = 0
    for idx in (out / "frames" / "shards").glob("*.idx"):
        damaged = [json.dumps({**json.loads(line), "lens": [1 << 50]}) for line in idx.read_text().splitlines()]
        idx.write_text("".join(line + "\n" for line in damaged))
        lines += len(damaged)
    assert lines == 2  # both videos' frames: the new prompt's captions need them again

    second = sweep(sweep_file(_caption_only(("brief", "capquiz_standard")), "sweep2.toml"), out)
    assert second.returncode == exitcodes.OK, second
    assert "MemoryError" not in second.stderr + second.stdout and "frames unreadable" not in second.stderr
    captions = read_store(out / "captions")
    assert captions.height == 4 and captions["error"].is_null().all()
    assert set(captions.filter(pl.col("prompt_id") == "capquiz_standard")["video_id"]) == {"shapes-000",
                                                                                            "shapes-001"}
