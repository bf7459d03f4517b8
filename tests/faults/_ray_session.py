"""Helpers for the Ray privacy and cleanup tests: a real driver process started from a clean environment (none of
the test suite's Ray settings), the processes of its Ray session, and their listening sockets."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]

#: a library-level driver: init_ray, one remote task per CPU, then "READY" and wait for a line on stdin to exit.
DRIVER = """
import os, sys
from capeval.engine.ray_local import init_ray
import ray
init_ray(num_cpus=2, temp_dir=sys.argv[1])
@ray.remote
def pid():
    return os.getpid()
ray.get([pid.remote() for _ in range(2)])
print("READY", flush=True)
sys.stdin.readline()
"""

#: what a user's shell might not have set, and the test suite's conftest does: none of it reaches the driver.
SUITE_ONLY = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_ADDRESS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
              "VLLM_CPU_KVCACHE_SPACE", "VLLM_USE_AOT_COMPILE", "PYTEST_CURRENT_TEST", "PYTEST_VERSION")


def clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in SUITE_ONLY and not k.startswith("RAY_")}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    return env


def short_temp_dir() -> str:
    """Ray's session sockets live under its temp dir; AF_UNIX paths must stay under 108 bytes."""
    return tempfile.mkdtemp(prefix="rc", dir="/tmp")


def start_driver(temp_dir: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, temp_dir], cwd=REPO, env=clean_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    if line.strip() != "READY":
        proc.kill()
        raise AssertionError(f"driver did not start Ray: {line!r} {proc.stderr.read()[-3000:]}")
    return proc


def session_processes(driver_pid: int) -> dict[int, float]:
    """pid -> start time of the driver and every process below it (its Ray session, agents and workers included)."""
    driver = psutil.Process(driver_pid)
    procs = {driver_pid: driver.create_time()}
    for child in driver.children(recursive=True):
        try:
            procs[child.pid] = child.create_time()
        except psutil.Error:
            continue
    return procs


def survivors(procs: dict[int, float]) -> dict[int, str]:
    """Those of `procs` still running (same pid and start time; zombies count as gone), with their names."""
    alive = {}
    for pid, started in procs.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE:
                alive[pid] = proc.name()
        except psutil.Error:
            continue
    return alive


def listening(procs) -> list[tuple[int, str, str, int]]:
    """(pid, name, ip, port) of every listening TCP socket of `procs`."""
    found = []
    for pid in procs:
        try:
            proc = psutil.Process(pid)
            name = proc.name()
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((pid, name, conn.laddr.ip, conn.laddr.port))
        except psutil.Error:
            continue
    return found


def listening_ports() -> set[int]:
    """Every TCP port in LISTEN state on the machine (/proc/net/tcp{,6}: no process access needed)."""
    return {c.laddr.port for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def is_loopback(ip: str) -> bool:
    return ip in ("127.0.0.1", "::1", "::ffff:127.0.0.1") or ip.startswith("127.")


def kill_all(procs) -> None:
    """The test's own cleanup: whatever is left of a session it started."""
    for pid, started in dict(procs).items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == started:
                proc.kill()
        except psutil.Error:
            continue


def wait_until(predicate, timeout: float, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)
