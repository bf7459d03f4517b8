"""Issue 26 item 1: the watchdog knows the run's processes by something fixed when they are created, not by what a
command line shows at one poll. A driver whose every child spends 1.5 s between fork and exec (a slow `preexec_fn`,
longer than the watchdog's poll: it sees the GCS and the raylet while they still show the driver's command line)
starts its private Ray (real Ray, real agents) and one child of its own; `kill -9` of the driver, repeated on fresh
drivers, then SIGHUP to a fresh driver's process group, must leave no process of its Ray (GCS, raylet,
DashboardAgent, RuntimeEnvAgent, workers), no slow child and no port behind within a bounded time."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from _ray_session import (REPO, clean_env, kill_all, listening, listening_ports, session_processes, short_temp_dir,
                          survivors, wait_until)

BOUND_S = 30
#: how each fresh driver is stopped: `kill -9` of the driver alone (three times), then SIGHUP to its process group
#: (a closed terminal)
STOPS = ("kill -9", "kill -9", "kill -9", "SIGHUP")

#: a driver whose children exec late: subprocess.Popen is slowed before Ray is imported (Ray's ConsolePopen, which
#: starts the GCS and the raylet, subclasses it); then init_ray, a task, and a child of the run's own.
SLOW_EXEC_DRIVER = """
import os, subprocess, sys, time

class SlowExecPopen(subprocess.Popen):
    def __init__(self, *args, **kwargs):
        inner = kwargs.get("preexec_fn")

        def slow():
            time.sleep(1.5)
            if inner is not None:
                inner()

        kwargs["preexec_fn"] = slow
        super().__init__(*args, **kwargs)

subprocess.Popen = SlowExecPopen

import ray
from capeval.engine.ray_local import init_ray

init_ray(num_cpus=1, temp_dir=os.environ["CAPEVAL_TEST_RAY_TEMP"])

@ray.remote
def one():
    return 1

assert ray.get(one.remote()) == 1
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
time.sleep(2.5)  # the child has exec'd, and the watchdog has looked at it before and after
print("READY", child.pid, flush=True)
sys.stdin.readline()
"""


def _start(temp: str) -> tuple[subprocess.Popen, int]:
    # Ray's temp dir goes by the environment: a command line naming it would make the driver's forks look like Ray's
    # processes before their exec (as a `capeval sweep` command line does not)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_EXEC_DRIVER], cwd=REPO,
                            env={**clean_env(), "CAPEVAL_TEST_RAY_TEMP": temp},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    line = proc.stdout.readline().split()
    if not line or line[0] != "READY":
        proc.kill()
        raise AssertionError(f"driver did not start Ray: {line!r} {proc.stderr.read()[-3000:]}")
    return proc, int(line[1])


@pytest.mark.slow
def test_kill_9_and_sighup_of_drivers_with_slow_exec_children_leave_nothing():
    for attempt, stop in enumerate(STOPS):
        temp = short_temp_dir()
        driver, child = _start(temp)
        procs: dict = {}
        try:
            def ray_up():  # the agents are the last of a Ray session to start
                procs.update(session_processes(driver.pid))
                names = set(survivors(procs).values())
                return {"gcs_server", "raylet"} <= names and sum("Agent" in n for n in names) == 2
            assert wait_until(ray_up, 120, interval=0.1), f"Ray never came up: {survivors(procs)}"
            assert child in procs
            ports = {port for *_, port in listening(procs)}
            if stop == "kill -9":
                driver.send_signal(signal.SIGKILL)
            else:
                os.killpg(driver.pid, signal.SIGHUP)  # the driver leads its own session (start_new_session)
            t0 = time.monotonic()
            gone = wait_until(lambda: not survivors(procs) and not (ports & listening_ports()), BOUND_S)
            assert gone, (f"stop {attempt + 1} of {len(STOPS)}: {BOUND_S}s after {stop}: alive {survivors(procs)}, "
                          f"listening {sorted(ports & listening_ports())}")
            print(f"stop {attempt + 1}: {len(procs)} processes gone {time.monotonic() - t0:.1f}s after {stop}")
        finally:
            driver.kill()
            driver.wait()
            kill_all(procs)
            shutil.rmtree(temp, ignore_errors=True)
