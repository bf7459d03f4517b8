"""Shared fixtures: where the real data lives, and one real local Ray for the whole session."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CAPEVAL_SHARED_DATA", REPO.parent / "shared" / "data")).resolve()

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# vLLM 0.32's AOT-compiled artifacts do not load on torch 2.13 ("'function' object has no attribute
# 'finalize_loading'"), so with AOT compile on (vLLM's default) every server that compiles -- the stock-vLLM
# default-judge server and docs/first-hour.md's, both at vLLM's defaults, without --enforce-eager -- compiles from
# scratch (77 s of compiling alone on this 2-core machine at load 6). Off, the later one reuses Inductor's cache of
# the first (its whole engine start: 23 s at load 9). Only the compile cache differs, not what the server runs.
os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")


#: Tests that must run while no other test of the run does (by path, so the protected fault tests stay untouched):
#: they check that the ports of a Ray they killed stop listening anywhere on the machine, and a Ray another worker
#: starts meanwhile may bind one of those ports again (its dashboard agent's port is a fixed 52365).
ALONE = ("tests/faults/test_ray_cleanup.py", "tests/faults/test_ray_reaper_slow_exec.py")
#: set by the controlling pytest process for its workers (pytest-xdist, scripts/test.sh): the folder of the locks
#: that run the `alone` tests alone
LOCK_DIR_ENV = "CAPEVAL_TEST_LOCK_DIR"


def pytest_addoption(parser):
    parser.addoption("--scale", action="store_true",
                     help="also run the scale runs (marked `scale`, minutes each), which the suite deselects")


def pytest_configure(config):
    config.addinivalue_line("markers", "scale: a scale run (minutes on 2 cores); deselected unless --scale is given")
    config.addinivalue_line("markers", "alone: runs while no other test of the run does (with pytest-xdist workers)")
    if not hasattr(config, "workerinput"):  # the controlling process (or a run without workers)
        os.environ[LOCK_DIR_ENV] = tempfile.mkdtemp(prefix="capeval-test-locks-")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ.pop(LOCK_DIR_ENV, ""), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """The suite (scripts/test.sh) stays within its time on 2 cores: scale runs are deselected unless --scale (e.g.
    `bash scripts/test.sh --scale -m scale`, docs/bench.md "Scale runs"). Tests of the ALONE files get the `alone`
    mark."""
    for item in items:
        if item.nodeid.split("::")[0] in ALONE:
            item.add_marker("alone")
    if config.getoption("--scale"):
        return
    scale = [item for item in items if item.get_closest_marker("scale")]
    if scale:
        config.hook.pytest_deselected(items=scale)
        items[:] = [item for item in items if not item.get_closest_marker("scale")]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With workers, every test runs under a shared lock and an `alone` test under an exclusive one, around its whole
    protocol (fixture set-up and tear-down too: a session fixture another worker sets up may start a Ray). A gate lock
    taken first keeps a waiting `alone` test from being starved by the other workers' next tests."""
    lock_dir = os.environ.get(LOCK_DIR_ENV)
    if not lock_dir or not os.environ.get("PYTEST_XDIST_WORKER"):
        return (yield)
    alone = item.get_closest_marker("alone") is not None
    with open(Path(lock_dir) / "gate", "a") as gate, open(Path(lock_dir) / "room", "a") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"real data not found at {SHARED_DATA} (clone beside ../shared or set CAPEVAL_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def ray_local(tmp_path_factory):
    """A real local Ray: 2 CPUs, a bounded object store, bound to loopback."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",  # a private instance, never a cluster another test started with `ray start`
            num_cpus=2,
            object_store_memory=256 * 1024 * 1024,
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            log_to_driver=False,
            _temp_dir=str(tmp_path_factory.mktemp("ray")),
        )
    yield ray
    ray.shutdown()


# Shared fixture modules (tests/ is on sys.path in pytest's default import mode).
from _fixtures_vllm import *  # noqa: E402,F401,F403
from _fixtures_video import *  # noqa: E402,F401,F403
