"""The watchdog (engine/ray_reaper.py) reads each new process's environment from /proc/PID/environ, which Linux
shows empty while an exec is replacing the process's memory. A child of the driver read at that moment must be looked
at again at the next poll, not judged "not the run's" for good: the run's slow child, its GCS or its raylet caught
inside their exec would otherwise outlive a killed driver. A real child process with the run's marker; the first read
of its environment is the one an exec in progress gives."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from capeval.engine import ray_reaper


@pytest.fixture
def marked_child():
    marker = ray_reaper.new_marker()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, ray_reaper.MARKER_ENV: marker})
    try:
        yield child, marker
    finally:
        child.kill()
        child.wait()


def test_a_child_read_inside_its_exec_is_looked_at_again_and_found(marked_child, monkeypatch):
    child, marker = marked_child
    me = psutil.Process()
    watch = ray_reaper.Watch(me.pid, me.create_time(), marker)
    real = ray_reaper._environ
    reads = {child.pid: 0}

    def environ(pid):
        if pid == child.pid:
            reads[pid] += 1
            if reads[pid] == 1:
                return b""  # what /proc/PID/environ gives inside an exec
        return real(pid)

    monkeypatch.setattr(ray_reaper, "_environ", environ)
    watch.look(ray_reaper._table())
    assert child.pid not in watch.seen and child.pid in watch.forks  # not judged yet
    watch.look(ray_reaper._table())
    assert reads[child.pid] == 2 and watch.seen.get(child.pid) == psutil.Process(child.pid).create_time()
    assert child.pid not in watch.forks


def test_a_process_without_the_marker_is_still_judged_once():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, "UNRELATED": "1"})
    try:
        me = psutil.Process()
        watch = ray_reaper.Watch(me.pid, me.create_time(), ray_reaper.new_marker())
        watch.look(ray_reaper._table())
        started = psutil.Process(child.pid).create_time()
        assert (child.pid, started) in watch.judged and child.pid not in watch.seen and child.pid not in watch.forks
    finally:
        child.kill()
        child.wait()
