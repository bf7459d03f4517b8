"""A pytest plugin for runs with pytest-xdist workers (scripts/test.sh): a test marked `alone` runs while no other
test of the run does. Every test runs under a shared lock, an `alone` one under an exclusive lock, around its whole
protocol: fixture set-up and tear-down too, since a session fixture another worker sets up may start a Ray or a
server. A gate lock taken first keeps a waiting `alone` test from being starved by the other workers' next tests.
Registered by tests/conftest.py; without workers it does nothing."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import pytest

#: set by the controlling pytest process for its workers: the folder of the run's locks
LOCK_DIR_ENV = "CAPEVAL_TEST_LOCK_DIR"


class RunAlone:
    def __init__(self, config: pytest.Config):
        config.addinivalue_line("markers", "alone: runs while no other test of the run does (with pytest-xdist workers)")
        # The controller (or a run without workers) makes the folder; its workers, started after pytest_configure,
        # inherit the variable.
        self.controller = not hasattr(config, "workerinput")
        if self.controller:
            os.environ[LOCK_DIR_ENV] = tempfile.mkdtemp(prefix="capeval-test-locks-")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.controller:
            shutil.rmtree(os.environ.pop(LOCK_DIR_ENV, ""), ignore_errors=True)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        lock_dir = os.environ.get(LOCK_DIR_ENV)
        if self.controller or not lock_dir:
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
