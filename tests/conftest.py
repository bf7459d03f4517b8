"""Shared fixtures: where the real data lives, and one real local Ray for the whole session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _run_alone import RunAlone

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


#: Tests that run while no other test of the run does (by path, so the protected fault tests stay untouched; see
#: _run_alone.py): they check that the ports of a Ray they killed stop listening anywhere on the machine, and a Ray
#: another pytest-xdist worker starts meanwhile may bind one of them again (its dashboard agent's port is a fixed 52365).
ALONE = ("tests/faults/test_ray_cleanup.py", "tests/faults/test_ray_reaper_slow_exec.py")


def pytest_addoption(parser):
    parser.addoption("--scale", action="store_true",
                     help="also run the scale runs (marked `scale`, minutes each), which the suite deselects")


def pytest_configure(config):
    config.addinivalue_line("markers", "scale: a scale run (minutes on 2 cores); deselected unless --scale is given")
    config.pluginmanager.register(RunAlone(config), "capeval-run-alone")


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


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"real data not found at {SHARED_DATA} (clone beside ../shared or set CAPEVAL_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def ray_local(tmp_path_factory):
    """A real local Ray: 2 CPUs, a bounded object store, bound to loopback; started as capeval starts its own
    (engine/ray_local.py init_ray), so its watchdog kills what `ray.shutdown()` leaves behind once this test process
    is gone (Ray 2.60's dashboard and runtime-env agents outlive the raylet, and one spun a core after the suite)."""
    import ray

    from capeval.engine.ray_local import init_ray

    if not ray.is_initialized():
        os.environ.pop("RAY_ADDRESS", None)  # a private instance, never a cluster another test started
        init_ray(num_cpus=2, object_store_mb=256, temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def scheduling_policy_kept():
    """Fails the test after which this process's scheduling differs, and puts it back: a library that raises the
    test process to a real-time policy (SVT-AV1 does, as root) makes every process the suite starts afterwards
    real-time too, and one busy Ray agent then starves the 2-core CI machine until the run times out."""
    if not hasattr(os, "sched_getscheduler"):  # not Linux: no scheduling policy to keep
        yield
        return
    before = (os.sched_getscheduler(0), os.sched_getparam(0))
    yield
    after = (os.sched_getscheduler(0), os.sched_getparam(0))
    if after != before:
        os.sched_setscheduler(0, *before)
        pytest.fail(f"the test left this process's scheduling at {after} (was {before})")


# Shared fixture modules (tests/ is on sys.path in pytest's default import mode).
from _fixtures_vllm import *  # noqa: E402,F401,F403
from _fixtures_video import *  # noqa: E402,F401,F403
