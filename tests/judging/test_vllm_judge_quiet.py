"""`capeval judge --judge vllm` (an in-process vLLM engine over the suite's tiny model) keeps vLLM's log lines,
its checkpoint-loading bar and torch's deprecation warnings out of the terminal (they were ~80 lines, on stdout
among the results); `--verbose` shows them. One real run of the command, in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_in_process_vllm_judge_prints_only_capevals_lines(tiny_lm_dir, tmp_path):
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    items.write_text("".join(json.dumps({"item_id": f"v{v}/q", "video_id": f"v{v}", "task": "counting",
                                         "annotation": "How many shapes?", "options": ["1", "2", "3", "4", "5"],
                                         "answer": "2", "category": "counting", "benchmark": "capquiz"}) + "\n"
                             for v in range(2)))
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": "Two shapes move."}) + "\n"
                                for v in range(2)))
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    for key in ("VLLM_LOGGING_LEVEL", "TRANSFORMERS_VERBOSITY"):  # what the command sets itself, not the suite
        env.pop(key, None)
    run = subprocess.run([sys.executable, "-m", "capeval.engine.cli", "judge", "--protocol", "capquiz", "--items", str(items),
                          "--captions", str(captions), "--judge", "vllm", "--judge-model", str(tiny_lm_dir),
                          "--judge-option", "max_model_len=2048", "--out", str(tmp_path / "v.parquet"),
                          "--cache", str(tmp_path / "cache"), "--resamples", "0", "--no-progress"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = (run.stdout + run.stderr).splitlines()
    noise = [line for line in lines if " INFO " in line or " WARNING " in line or "Loading safetensors" in line
             or "FutureWarning" in line]
    assert not noise, "\n".join(noise[:20])
    assert len(lines) <= 30, "\n".join(lines)
    assert any("first-step requests" in line for line in lines) and "capquiz leaderboard" in run.stdout
