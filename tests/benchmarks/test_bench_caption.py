"""The caption benchmark's machinery at a tiny size: a caption-only sweep against the lognormal loopback captioner
server (its own process) and the batch-of-4 baseline on the same server; the JSON carries captions/s, the bound and
the share (no timing is asserted), and `capeval bench caption` refuses bad arguments with exit code 2."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

from capeval.benchmarks.bench_caption import bound_per_s, http_section, steady_per_s

REPO = Path(__file__).resolve().parents[2]


def test_caption_benchmark_runs_the_sweep_and_the_batch_baseline(ray_local):
    out = http_section(True, n_videos=6, baseline_videos=4)
    assert out["videos"] == 6 and out["captioned"] == 6 and out["failed"] == 0 and out["exit_code"] == 0
    assert out["captions_per_s"] > 0 and out["stage_work_s"] > 0
    assert out["bound_per_s"] == round(64 / (0.3 * math.exp(0.32)), 1) == 154.9
    assert abs(out["share"] - out["captions_per_s"] / out["bound_per_s"]) < 0.005
    base = out["batch_loop_baseline"]
    assert base["videos"] == base["captioned"] == 4 and base["batch"] == 4 and base["captions_per_s"] > 0
    assert out["options"].startswith("defaults")


def test_steady_rate_counts_arrivals_while_the_window_is_full():
    # 64 arrivals at t=0 fill the window, then one every 10 ms: 100 per second while full
    attempts = [[f"k{i}", 0.0, "ok"] for i in range(64)] + [[f"k{63 + i}", 0.01 * i, "ok"] for i in range(1, 101)]
    assert abs(steady_per_s(attempts) - 100.0) < 1e-6
    assert steady_per_s(attempts[:65]) is None  # nothing after the window filled
    # a hedge copy or a retry of a request already counted arrives again: it is no more captions
    copies = [[f"k{63 + i}", 0.01 * i + 0.005, "cancelled"] for i in range(1, 101)]
    assert abs(steady_per_s(attempts + copies) - 100.0) < 1e-6
    assert bound_per_s(64, 0.3, 0.0) == 64 / 0.3


def test_bad_arguments_exit_2():
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    for args in (["--only", "nope"], ["--videos", "0"]):
        proc = subprocess.run([sys.executable, "-m", "capeval.engine.cli", "bench", "caption", "--json", *args], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert (args[0] in proc.stderr) and not proc.stdout.strip().startswith("{"), proc.stderr
