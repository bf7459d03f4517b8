"""The caption benchmark's machinery at a tiny size: a caption-only sweep against the lognormal loopback captioner
server (its own process) and the batch-of-4 baseline on the same server; the JSON carries captions/s, the bound and
the share (no timing is asserted), and `capeval bench caption` refuses bad arguments with exit code 2."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import urllib.request
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
    arrivals = [0.0] * 64 + [0.01 * i for i in range(1, 101)]
    assert abs(steady_per_s(arrivals) - 100.0) < 1e-6
    assert steady_per_s(arrivals[:65]) is None  # nothing after the window filled
    assert bound_per_s(64, 0.3, 0.0) == 64 / 0.3


def test_the_server_logs_each_distinct_request_once_however_often_it_arrives():
    # caption requests share their text and differ in their images: each distinct body is one request; a hedge
    # copy or a retry sends the same body again and is not logged again
    from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer

    def body(image: str) -> bytes:
        return json.dumps({"model": "loopback", "max_tokens": 8, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Describe the video."},
            {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{image}"}}]}]}).encode()

    with LoopbackServer(FaultConfig()) as server:
        for image in ("AAAA", "BBBB", "AAAA", "AAAA"):
            req = urllib.request.Request(server.base_url + "/chat/completions", data=body(image),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.status == 200
        stats = server.stats()
    assert len(stats["attempts"]) == 4 and len({a[0] for a in stats["attempts"]}) == 1  # one text, four arrivals
    assert len(stats["first_arrivals"]) == 2
    assert stats["first_arrivals"] == sorted(stats["first_arrivals"])


def test_bad_arguments_exit_2():
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    for args in (["--only", "nope"], ["--videos", "0"]):
        proc = subprocess.run([sys.executable, "-m", "capeval.engine.cli", "bench", "caption", "--json", *args], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert (args[0] in proc.stderr) and not proc.stdout.strip().startswith("{"), proc.stderr
