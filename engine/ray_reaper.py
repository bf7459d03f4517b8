"""Nothing a killed capeval run started outlives it: a watchdog for the private local Ray of one driver.

`kill -9` of a driver leaves Ray's processes behind: the GCS and raylet may linger, and the DashboardAgent and
RuntimeEnvAgent (started by the raylet, renamed `ray::…`, deaf to SIGTERM) keep ~210 MB and open ports for good.
Ray 2.60 has no option to start a local node without those two agents, so they are reaped instead.

`start_watchdog(driver_pid, temp_dir)` (called by engine.ray_local.init_ray just BEFORE it starts a private local
Ray: a run killed while `ray.init` is still starting the agents must leave nothing either) starts this file as a
separate process in its own session, so a SIGKILL of the driver or of its process group does not reach it, and
returns once the watchdog has taken its first look. The watchdog:

- polls the driver every `POLL_S` and records the processes of *this driver's* Ray: the driver's direct children
  whose command line names Ray's temp dir of this run (gcs_server, raylet, monitor, dashboard and log monitor all
  do; another Ray's processes are never this driver's children), and every descendant of those (the agents and
  workers, renamed `ray::…` so their command lines name nothing, and whatever a task spawned), each as
  (pid, start time) so a recycled pid is never mistaken for one of them;
- when the driver is gone, freezes every recorded process still alive (SIGSTOP: a frozen raylet cannot start
  a worker that would escape), adds their current descendants, and SIGKILLs them all; then exits;
- exits without killing anything once every recorded process is gone (the driver called `ray.shutdown()`).

It imports only the standard library and psutil (a capeval dependency), and is run as a script by path, so it
works whatever the driver's working directory or sys.path.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: seconds between two looks at the driver; a worker started and orphaned within one poll is still found, since
#: reaping freezes the recorded processes before it collects their descendants.
POLL_S = 0.5


def start_watchdog(driver_pid: int, temp_dir: str) -> subprocess.Popen:
    """Start the watchdog of the local Ray that `driver_pid` starts under `temp_dir`, in its own session; returns
    once it watches (it says so on its stdout), so nothing Ray starts after this call can escape it."""
    import psutil

    started = psutil.Process(driver_pid).create_time()
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(driver_pid), repr(started), temp_dir],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True)
    with proc.stdout:
        proc.stdout.readline()  # "watching", or EOF if it could not start: the run goes on either way
    return proc


def _table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, start time) of every live process, read once per poll (one pass over /proc is far
    cheaper than asking each recorded process for its children)."""
    import psutil

    table = {}
    for proc in psutil.process_iter(["ppid", "create_time", "status"]):
        info = proc.info
        if info["ppid"] is not None and info["create_time"] is not None and info["status"] != psutil.STATUS_ZOMBIE:
            table[proc.pid] = (info["ppid"], info["create_time"])
    return table


def _descendants(pids: set[int], table: dict) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), list(pids)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _alive(seen: dict, table: dict) -> set[int]:
    return {pid for pid, started in seen.items() if pid in table and table[pid][1] == started}


def _names(pid: int, temp_dir: str) -> bool | None:
    """Whether `pid`'s command line names Ray's temp dir; None while it has none yet (forked, not yet exec'd)."""
    import psutil

    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    return any(temp_dir in arg for arg in cmdline) if cmdline else None


def reap(seen: dict) -> int:
    """Freeze, then SIGKILL, every recorded process still alive and all their descendants; returns how many."""
    frozen: set[int] = set()
    table = _table()
    pending = _alive(seen, table)
    while pending:  # until no frozen process has a descendant that is not frozen yet
        for pid in pending:
            _signal(pid, signal.SIGSTOP)
        frozen |= pending
        table = _table()
        pending = _descendants(frozen, table) - frozen
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and frozen & set(_table()):
        time.sleep(0.05)
    return len(frozen)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def watch(driver_pid: int, driver_started: float, temp_dir: str) -> None:
    seen: dict[int, float] = {}  # pid -> start time of every process of this driver's Ray seen so far
    judged: set[tuple[int, float]] = set()  # direct children of the driver already checked for being Ray's
    told = False
    while True:
        table = _table()
        driver = table.get(driver_pid)
        # start times are read by two processes: allow for float noise, not for a recycled pid
        if driver is None or abs(driver[1] - driver_started) > 0.5:
            reap(seen)
            return
        for pid, (ppid, started) in table.items():
            if ppid == driver_pid and pid != os.getpid() and (pid, started) not in judged:
                verdict = _names(pid, temp_dir)
                if verdict is not None:
                    judged.add((pid, started))
                if verdict:
                    seen[pid] = started
        for pid in _descendants(_alive(seen, table), table):
            seen.setdefault(pid, table[pid][1])
        if seen and not _alive(seen, table):
            return  # ray.shutdown() took everything down; the driver goes on without a local Ray
        if not told:
            _say_watching()
            told = True
        time.sleep(POLL_S)


def _say_watching() -> None:
    """Tell start_watchdog that the first look is taken, then let go of the pipe (the driver closes its end)."""
    try:
        sys.stdout.write("watching\n")
        sys.stdout.flush()
    except OSError:
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


if __name__ == "__main__":
    # Ctrl-C or a closed terminal hits the driver's whole session; the watchdog must still do its one job.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    watch(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
