"""Sweeps judged through the fake Batch API (fake_batch_server.py) against the same sweeps judged by the streaming
OpenAI-compatible judge (capeval.benchmarks.loopback_server, which answers every body as the fake Batch API does): equal
verdict tables, each request key put in a batch once, also across a kill -9 of `capeval sweep` between creating a
batch and its completion, and across `--no-wait` runs (exit code 75 while batches are pending)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from _batch_data import file_sweep
from _sweeps import sweep_toml

from capeval.engine import exitcodes
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

REPO = Path(__file__).resolve().parents[2]


def _judge(kind: str, base_url: str) -> dict:
    params = {"base_url": base_url, "model": "loopback", "api_key": "test-key", "structured": "vllm"}
    if kind == "openai-batch":
        params |= {"poll_s": 0.05, "poll_max_s": 0.2, "max_attempts": 2}
    return {"name": kind, "params": params}


def vidcapbench_sweep(folder: Path, judge: dict) -> Path:
    """VidCapBench (answer, then score) on QA items with captions from a file: no video, two judge steps."""
    return file_sweep(folder, "vidcapbench", judge)


def capquiz_sweep(folder: Path, judge: dict) -> Path:
    """CapQuiz on generated videos captioned by the local captioner while the judge works (overlap)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "capquiz.toml"
    path.write_text(sweep_toml("batch-capquiz", prompts=("capquiz_standard", "brief"), frames=("uniform:2",),
                               n_videos=3, judges=[judge], options={"n_resamples": 50}))
    return path


def verdicts(out: Path) -> pl.DataFrame:
    """Every verdict row of a run folder, without what differs by judge entry (cell key) or by clock (latency)."""
    frames = [pl.read_parquet(p) for p in sorted((out / "verdicts").rglob("*.parquet"))]
    table = pl.concat(frames).drop("cell_key", "latency_s")
    return table.sort(["request_key", "captioner", "prompt_id", "frame_spec", "trial"])


@pytest.fixture(scope="module")
def loopback():
    from capeval.benchmarks.loopback_server import LoopbackServer

    with LoopbackServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def streamed(tmp_path_factory, loopback, ray_local):
    """The streaming judge's verdicts, per protocol (computed once)."""
    out = {}
    for name, make in (("capquiz", capquiz_sweep), ("vidcapbench", vidcapbench_sweep)):
        folder = tmp_path_factory.mktemp(f"stream-{name}")
        result = run_sweep(load_sweep(make(folder, _judge("openai", loopback.base_url))), folder / "out",
                           progress=False, log=lambda m: None)
        assert result.exit_code == 0
        out[name] = verdicts(folder / "out")
    return out


@pytest.mark.parametrize("name,make", [("capquiz", capquiz_sweep), ("vidcapbench", vidcapbench_sweep)])
def test_batch_sweep_equals_streaming_sweep(name, make, streamed, batch_server, tmp_path, ray_local):
    result = run_sweep(load_sweep(make(tmp_path, _judge("openai-batch", batch_server.base_url))), tmp_path / "out",
                       progress=False, log=lambda m: None)
    assert result.exit_code == 0
    got = verdicts(tmp_path / "out")
    assert got.height == streamed[name].height > 0
    assert got.equals(streamed[name])
    stats = batch_server.stats()
    assert set(stats["seen"].values()) == {1}
    assert (tmp_path / "out" / "judge_cache" / "batches" / "batches.sqlite").is_file()
    if name == "capquiz":
        # captions were still being made when judging could start: the round waited for all of them (one batch)
        assert len(stats["batches"]) == 1 and len(stats["seen"]) == got.height
    else:
        assert len(stats["batches"]) >= 2  # the score step is a later round
    again = run_sweep(load_sweep(make(tmp_path, _judge("openai-batch", batch_server.base_url))), tmp_path / "out",
                      progress=False, log=lambda m: None)
    assert again.cells_run == 0 and batch_server.stats() == stats  # a finished sweep asks nothing


def _cli(sweep: Path, out: Path, *extra: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "capeval.engine.cli", "sweep", str(sweep), "--out", str(out),
                             "--no-progress", *extra], cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.slow  # two `capeval sweep` processes, each starting its own Ray
def test_kill_9_between_batch_creation_and_completion_then_rerun(streamed, batch_server, tmp_path):
    batch_server.behaviour.order = "hold"
    sweep = vidcapbench_sweep(tmp_path, _judge("openai-batch", batch_server.base_url))
    proc = _cli(sweep, tmp_path / "out")
    try:
        deadline = time.monotonic() + 240
        while not batch_server.stats()["batches"]:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no batch created"
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert [b["status"] in ("validating", "in_progress") for b in batch_server.stats()["batches"]] == [True]
    batch_server.behaviour.order = "fifo"
    rerun = _cli(sweep, tmp_path / "out")
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-3000:]
    stats = batch_server.stats()
    assert set(stats["seen"].values()) == {1}, "a request key was put in two batches"
    assert verdicts(tmp_path / "out").equals(streamed["vidcapbench"])


@pytest.mark.slow  # three `capeval sweep` processes
def test_no_wait_exits_pending_and_later_runs_collect(streamed, batch_server, tmp_path):
    batch_server.behaviour.order = "hold"
    sweep = vidcapbench_sweep(tmp_path, _judge("openai-batch", batch_server.base_url))
    for _ in range(2):  # submitted, then still pending: nothing is sent again
        proc = _cli(sweep, tmp_path / "out", "--no-wait")
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == exitcodes.PENDING, err[-3000:]
        assert "not finished" in err and "run the same command again" in err
        assert len(batch_server.stats()["batches"]) == 1
    batch_server.behaviour.order = "fifo"
    proc = _cli(sweep, tmp_path / "out", "--no-wait")  # collects the answers, sends the scores, collects them
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    stats = batch_server.stats()
    assert len(stats["batches"]) >= 2 and set(stats["seen"].values()) == {1}
    assert verdicts(tmp_path / "out").equals(streamed["vidcapbench"])
