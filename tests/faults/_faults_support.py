"""Helpers of the fault suite: sweeps run as real `capeval` processes (own session, loopback-only local Ray),
killed for real, and the stores checked for lost or duplicated rows afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from _sweeps import sweep_toml

REPO = Path(__file__).resolve().parents[2]
RUN_CLI = "import sys; from capeval.engine.cli import main; sys.exit(main(sys.argv[1:]))"
KILLED = -signal.SIGKILL


def sweep_text(*, dataset: dict, judge: dict | None = None, prompts=("brief",), frames=("uniform:2",)) -> str:
    """The fault suite's sweep (tests/_sweeps.py): one batch per video part, few resamples."""
    return sweep_toml("faults", prompts=prompts, frames=frames, dataset=dataset, judges=[judge or "local"],
                      options={"batch_size": 1, "n_resamples": 20})


def synthetic(n_videos: int = 3, duration_s: float = 1.0) -> dict:
    return {"name": "shapes", "kind": "synthetic", "n_videos": n_videos, "duration_s": duration_s}


#: every caption row committed as it is stored, so that a test can see one was (`caption_stored`)
COMMIT_EACH_ROW = {"CAPEVAL_STORE_COMMIT": "rows=1"}


def caption_stored(out: Path):
    """A predicate: has the run in `out` (started with COMMIT_EACH_ROW) stored a caption? A signal sent mid-caption waits
    for it: the captioner sends its next request the moment an answer comes (its queued calls), so that request can
    arrive before the answer's row reached the driver, and a run ended then has made no caption it could record."""
    captions = out / "captions"
    return lambda: any(captions.glob("*.parquet"))


async def wait_until_ready(ready, timeout_s: float = 60.0) -> None:
    """Until `ready()` holds, or `timeout_s` passed (then the caller goes on and its assertions say what was wrong);
    `wait_for` below is its twin for a test thread, which may block."""
    import asyncio

    since = time.monotonic()
    while not ready() and time.monotonic() - since < timeout_s:
        await asyncio.sleep(0.02)


def openai_judge(base_url: str, **params) -> dict:
    return {"name": "openai", "params": {"base_url": base_url, "model": "loopback", "api_key": "test-key",
                                         "timeout_s": 2.0, "max_attempts": 2, "backoff_base_s": 0.05,
                                         "structured": "vllm", **params}}


def cli_env(**extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_ADDRESS", None)  # always a private local Ray
    env.pop("CAPEVAL_KILL_AT", None)
    env.update(extra)
    return env


class Run:
    """One finished `capeval` process: return code and output."""

    def __init__(self, proc: subprocess.Popen, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = proc.returncode, stdout, stderr

    def __repr__(self) -> str:
        return f"Run(rc={self.returncode}, stderr=...{self.stderr[-2000:]!r})"


def start_capeval(args: list[str], *, env: dict | None = None, prefix: list[str] | None = None) -> subprocess.Popen:
    cmd = (prefix or []) + [sys.executable, "-c", RUN_CLI] + [str(a) for a in args]
    return subprocess.Popen(cmd, cwd=REPO, env=env or cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float = 240) -> Run:
    """Wait for `proc`, then kill whatever is left of its session (Ray processes of a killed driver)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        reap(proc)
        out, err = proc.communicate()
        raise AssertionError(f"capeval did not finish within {timeout}s: {err[-2000:]}")
    finally:
        reap(proc)
    return Run(proc, out, err)


def reap(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def capeval(args: list[str], *, env: dict | None = None, timeout: float = 240, prefix=None) -> Run:
    return finish(start_capeval(args, env=env, prefix=prefix), timeout)


def sweep(sweep_file: Path, out: Path, *extra: str, env: dict | None = None, timeout: float = 240, prefix=None) -> Run:
    return capeval(["sweep", sweep_file, "--out", out, "--no-progress", *extra], env=env, timeout=timeout,
                   prefix=prefix)


def read_store(folder: Path) -> pl.DataFrame:
    parts = [pl.read_parquet(p) for p in sorted(folder.glob("*.parquet"))]
    return pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()


def assert_no_duplicates(out: Path) -> dict:
    """Every store of a sweep folder holds each unit once; returns row counts per store."""
    counts = {}
    captions = read_store(out / "captions")
    assert captions["caption_key"].is_duplicated().sum() == 0, "a caption stored twice"
    counts["captions"] = captions.height
    index = read_store(out / "frames_index")
    assert index.select("video_id", "frame_spec").is_duplicated().sum() == 0, "a frames-index row stored twice"
    counts["frames_index"] = index.height
    verdicts = read_store(out / "verdicts")
    ident = ["cell_key", "item_id", "step", "sub_index", "seed", "trial"]
    assert verdicts.select(ident).is_duplicated().sum() == 0, "a verdict row stored twice"
    metrics = read_store(out / "metrics")
    for key in metrics["cell_key"].unique():
        assert (out / "metrics" / f"{key}.parquet").exists(), "a metrics row outside its cell's segment"
    assert set(verdicts["cell_key"].unique()) == set(metrics["cell_key"].unique()), "verdicts without metrics"
    counts["verdicts"], counts["metrics"] = verdicts.height, metrics.height
    assert not list(out.rglob(".*.tmp")), "a temp file left behind"
    return counts


def wait_for(predicate, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def sweep_file(tmp_path):
    def make(text: str, name: str = "sweep.toml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return make


class AppServer:
    """An aiohttp app served on 127.0.0.1:`port` from a thread (port 0: any free port)."""

    def __init__(self, app, port: int = 0):
        self.app, self.port = app, port
        self._loop = self._runner = self._thread = None

    def __enter__(self) -> "AppServer":
        import asyncio
        import threading

        from aiohttp import web

        ready = threading.Event()

        def main():
            self._loop = asyncio.new_event_loop()
            self._runner = web.AppRunner(self.app, access_log=None)
            self._loop.run_until_complete(self._runner.setup())
            site = web.TCPSite(self._runner, "127.0.0.1", self.port)
            self._loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())
            self._loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        assert ready.wait(30), "test server did not start"
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stats(self) -> dict:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=30) as resp:
            return json.loads(resp.read())

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)


def free_port() -> int:
    """A port nothing listens on (bound, read, closed): connections to it are refused until a server takes it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
