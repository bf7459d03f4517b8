"""`capeval submit` against a real Ray cluster on 127.0.0.1 started with token authentication (RAY_AUTH_MODE=token,
a token of its own), the client holding only RAY_AUTH_TOKEN (as a user exports it; no RAY_AUTH_MODE): the sweep is
judged by a loopback OpenAI-compatible server that counts requests. Submitting the same sweep a second time gets a
new submission id, runs in the same default output folder and sends zero judge requests, fetching the same results.
Without the token, the command ends in one line (exit 4); the token is in no file the job or the client wrote."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from _ray_cluster import REPO, LocalCluster
from _sweeps import write_sweep
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer

pytestmark = pytest.mark.slow


def _submit(sweep: Path, cluster: LocalCluster, out: Path, *, token: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=os.environ.get("PYTHONPATH", ""), PATH=cluster.env["PATH"], RAY_USAGE_STATS_ENABLED="0",
               **({"RAY_AUTH_TOKEN": token} if token else {}))
    return subprocess.run([sys.executable, "-m", "capeval.engine.cli", "submit", str(sweep), "--address", cluster.dashboard,
                           "--out", str(out)], cwd=sweep.parent, env=env, capture_output=True, text=True,
                          timeout=600)


def _holding(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_a_resubmission_to_a_token_auth_cluster_sends_no_judge_request(tmp_path):
    cluster = LocalCluster(cpus_per_node=1)
    token = cluster.env["RAY_AUTH_TOKEN"]
    try:
        with LoopbackServer(FaultConfig(), mode="process") as judge:
            sweep = write_sweep(tmp_path / "sweeps", "resume-" + secrets.token_hex(3), n_videos=2,
                                prompts=("brief",), frames=("uniform:2",), options={"n_resamples": 20},
                                judges=[{"name": "openai", "params": {"model": "loopback", "base_url": judge.base_url,
                                                                      "structured": "vllm"}}])
            refused = _submit(sweep, cluster, tmp_path / "refused", token=None)
            assert refused.returncode == 4, refused.stderr[-3000:]
            assert "HTTP 401" in refused.stderr.strip().splitlines()[-1] and "Traceback" not in refused.stderr

            first = _submit(sweep, cluster, tmp_path / "fetched", token=token)
            assert first.returncode == 0, first.stderr[-4000:]
            sent_first = judge.stats()["requests"]
            results_first = pl.read_parquet(tmp_path / "fetched" / "results.parquet")

            second = _submit(sweep, cluster, tmp_path / "fetched", token=token)
            assert second.returncode == 0, second.stderr[-4000:]
            sent_second = judge.stats()["requests"] - sent_first
    finally:
        cluster.stop()
    assert sent_first > 0 and sent_second == 0  # every judged request came back from the job's own cache
    ids = [re.search(r"submitted (\S+) to", p.stderr).group(1) for p in (first, second)]
    assert ids[1] == ids[0] + "-1"  # a new job (Ray keeps ids), the same output folder
    remote = Path(re.search(r"-> output (\S+) on the cluster", first.stderr).group(1))
    assert f"-> output {remote} on the cluster" in second.stderr
    try:
        assert results_first.height > 0
        assert pl.read_parquet(tmp_path / "fetched" / "results.parquet").equals(results_first)
        # the token: in no file of the job's output (run record, logs, staged inputs) or the fetched copy, and
        # never printed
        assert _holding(remote, token.encode()) == [] and _holding(tmp_path, token.encode()) == []
        assert all(token not in p.stdout + p.stderr for p in (refused, first, second))
    finally:
        shutil.rmtree(remote, ignore_errors=True)
