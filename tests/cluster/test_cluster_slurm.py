"""cluster/slurm_sweep.sbatch for real, when a Slurm controller answers on this machine (skipped otherwise): one
node, CPU only, a synthetic sweep written outside the repository; the job's Ray is gone afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest

from _ray_cluster import REPO, free_ports
from _sweeps import sweep_toml

pytestmark = pytest.mark.slow

SWEEP = sweep_toml("slurm-test", prompts=("brief",), frames=("uniform:2", "uniform:4"), options={"n_resamples": 50})


def _idle_cpus() -> int | None:
    if not shutil.which("sbatch") or not shutil.which("sinfo"):
        return None
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T %c"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.stdout.split("\n") if out.returncode == 0 else []:
        state, _, cpus = line.partition(" ")
        if state.startswith(("idle", "mixed")) and cpus.strip().isdigit():
            return int(cpus)
    return None


def test_sbatch_script_runs_a_sweep(tmp_path):
    cpus = _idle_cpus()
    if cpus is None:
        pytest.skip("no Slurm controller with an idle node here (Debian: apt-get install slurm-wlm; see cluster/README.md)")
    sweep = tmp_path / "elsewhere" / "slurm_test.toml"
    sweep.parent.mkdir()
    sweep.write_text(SWEEP)
    out, log = tmp_path / "out", tmp_path / "job.log"
    port = free_ports(1)[0]
    env = dict(os.environ, RAY_PORT=str(port))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(["sbatch", "--wait", "--export=ALL", "--nodes=1", "--gpus-per-node=0",
                           f"--cpus-per-task={min(cpus, 2)}", f"--output={log}", "--time=00:15:00",
                           str(REPO / "cluster" / "slurm_sweep.sbatch"), str(sweep), str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    text = log.read_text() if log.is_file() else ""
    assert proc.returncode == 0, proc.stderr + text[-4000:]
    assert "[capeval] Ray head" in text and "cells: 2 total" in text
    results = pl.read_parquet(out / "results.parquet")
    assert results.select("frame_spec").unique().height == 2
    # only this job's Ray was stopped, and it is gone
    deadline = time.time() + 60
    while time.time() < deadline:
        left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _has(p, f"--port={port}")]
        if not left:
            break
        time.sleep(1)
    assert not left


def _has(proc: Path, text: str) -> bool:
    try:
        return text.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False
