"""Nothing a killed capeval run started outlives it: a watchdog for the private local Ray of one driver.

`kill -9` of a driver leaves Ray's processes behind: the GCS and raylet may linger, and the DashboardAgent and
RuntimeEnvAgent (started by the raylet, renamed `ray::…`, deaf to SIGTERM) keep ~210 MB and open ports for good.
Ray 2.60 has no option to start a local node without those two agents, so they are reaped instead.

The run's processes are told apart by something fixed when each is created, never by a command line (a child looked
at between its fork and its exec still shows the driver's): an environment marker. capeval.engine.ray_local.init_ray sets
`MARKER_ENV` to a value unique to the run (`new_marker()`) in the driver's environment just before it starts Ray;
every process started from then on inherits it (Ray copies the driver's environment into the GCS and raylet, the
raylet into its agents and workers), and the environment a process was started with stays readable in
/proc/PID/environ whatever the process does later.

`start_watchdog(driver_pid, marker)` (called by init_ray just BEFORE it starts a private local Ray: a run killed while
`ray.init` is still starting the agents must leave nothing either) starts this file as a separate process in its own
session, so a SIGKILL of the driver or of its process group does not reach it, and returns once the watchdog has
taken its first look. The watchdog:

- polls the machine's processes every `POLL_S` and records, as (pid, start time) so a recycled pid is never mistaken
  for one of them, every process started with the run's marker and every descendant of one (a process that cleared
  its environment stays below one that has the marker). A process is judged once, after its exec: one whose
  environment is still exactly the driver's (a fork of the driver, possibly in a slow `preexec_fn`), or that shows
  none (read inside its exec: `Verdict.EXECUTING`), is looked at again at every poll until its exec gives it its own;
- when the driver is gone, freezes every recorded process still alive (SIGSTOP: a frozen raylet cannot start a
  worker that would escape), adds their current descendants, every process that has the marker by then, and the
  driver's own forks that never exec'd, and SIGKILLs them all; a fork of the driver made after the last poll and
  still before its exec is waited for (up to `EXEC_GRACE_S`) and killed once its exec shows the marker; then exits;
- exits without killing anything once the run's GCS or raylet was seen and every recorded process is gone (the
  driver called `ray.shutdown()`).

It imports only the standard library and psutil (a capeval dependency), and is run as a script by path, so it
works whatever the driver's working directory or sys.path.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from enum import Enum

#: seconds between two looks at the driver; a worker started and orphaned within one poll is still found, since
#: reaping freezes the recorded processes before it collects their descendants.
POLL_S = 0.5
#: the variable that marks every process of one run's Ray (its value: `new_marker()`)
MARKER_ENV = "CAPEVAL_RAY_RUN"
#: how long a fork of the dead driver, made after the last poll, is waited for to exec (and show the marker)
EXEC_GRACE_S = 30.0
#: the processes of a local Ray that live as long as it does: once one was seen, none of the run's processes being
#: left means `ray.shutdown()` (short-lived processes the driver ran before Ray started do not count)
RAY_CORE = ("gcs_server", "raylet")
#: how long, at the reap, a new process showing no environment is taken to be inside an exec
EXEC_WINDOW_S = 1.0


class Verdict(Enum):
    """What a process's environment says of it (`Watch.judge`)."""

    RUN = "started with the run's marker"
    OTHER = "started without it"
    DRIVER_ENV = "still the driver's environment: not exec'd yet, or exec'd with an unchanged copy (cannot tell yet)"
    # Linux's /proc/PID/environ reads empty while an exec is replacing the process's memory (reads in a tight loop of
    # a process exec'ing over and over came back empty 1 time in 10): a process caught there is looked at again
    EXECUTING = "no environment: inside an exec, or a process without memory of its own such as a kernel thread"


def new_marker() -> str:
    return secrets.token_hex(16)


def start_watchdog(driver_pid: int, marker: str) -> subprocess.Popen:
    """Start the watchdog of the local Ray whose processes carry `MARKER_ENV=marker`, in its own session; returns
    once it watches (it says so on its stdout), so nothing Ray starts after this call can escape it."""
    import psutil

    started = psutil.Process(driver_pid).create_time()
    env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}  # the watchdog is not one of the run's processes
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), str(driver_pid), repr(started), marker],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
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


def _environ(pid: int) -> bytes | None:
    """The environment `pid` was started with (NUL-separated), or None when it cannot be read (another user's, gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        pass
    try:  # other systems: psutil's reading of the same
        import psutil

        return b"\0".join(f"{k}={v}".encode() for k, v in psutil.Process(pid).environ().items()) + b"\0"
    except Exception:  # noqa: BLE001 - unreadable: not this run's
        return None


def _has_marker(environ: bytes, marker: str) -> bool:
    return b"\0" + f"{MARKER_ENV}={marker}".encode() + b"\0" in b"\0" + environ


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


def _name(pid: int) -> str:
    import psutil

    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return ""


def _alive(seen: dict, table: dict) -> set[int]:
    return {pid for pid, started in seen.items() if pid in table and table[pid][1] == started}


class Watch:
    """What the watchdog knows of one driver's run (see the module doc)."""

    def __init__(self, driver_pid: int, driver_started: float, marker: str):
        self.driver_pid, self.driver_started, self.marker = driver_pid, driver_started, marker
        self.driver_env = _environ(driver_pid)
        self.seen: dict[int, float] = {}  # pid -> start time of every process of this run seen so far
        self.judged: set[tuple[int, float]] = set()  # processes found not to be the run's (after their exec)
        self.forks: dict[int, float] = {}  # the driver's children not exec'd yet at the last look
        self.known: set[int] = set()  # the pids of the last look (a process not among them is new since)
        self.ray_seen = False  # whether the run's GCS or raylet was seen (then its end means ray.shutdown())
        self.me = os.getpid()

    def look(self, table: dict) -> None:
        """Record the run's processes among `table`'s (one poll)."""
        for pid, (ppid, started) in table.items():
            if pid == self.me or pid == self.driver_pid or pid in self.seen or (pid, started) in self.judged:
                continue
            if started < self.driver_started - 1:  # older than the driver: cannot hold a marker it made
                self.judged.add((pid, started))
                continue
            verdict = self.judge(pid)
            if verdict is Verdict.RUN:
                self.seen[pid] = started
                self.forks.pop(pid, None)
                self.ray_seen = self.ray_seen or _name(pid) in RAY_CORE
            elif verdict in (Verdict.DRIVER_ENV, Verdict.EXECUTING):
                # still the driver's environment (a fork of it before its exec) or inside an exec: looked at again
                if ppid == self.driver_pid:
                    self.forks[pid] = started
            else:
                self.judged.add((pid, started))
                self.forks.pop(pid, None)
        for pid in _descendants(_alive(self.seen, table), table):
            self.seen.setdefault(pid, table[pid][1])
        self.known = set(table)

    def judge(self, pid: int) -> Verdict:
        environ = _environ(pid)
        if environ is None:
            return Verdict.OTHER
        if environ == b"":
            return Verdict.EXECUTING
        if _has_marker(environ, self.marker):
            return Verdict.RUN
        return Verdict.DRIVER_ENV if environ == self.driver_env else Verdict.OTHER

    def reap(self) -> int:
        """The driver is gone: freeze, then SIGKILL, every process of the run still alive (module doc)."""
        last = self.known
        table = _table()
        self.look(table)
        doomed = dict(self.seen) | {pid: t for pid, t in self.forks.items() if self.judge(pid) is not Verdict.OTHER}
        killed = reap(doomed)
        deadline = time.monotonic() + EXEC_GRACE_S
        executing: dict[int, float] = {}  # pid -> when it was first found inside an exec
        while time.monotonic() < deadline:  # forks made after the last poll, still before their exec or inside it
            table = _table()
            now = time.monotonic()
            pending = set()
            for pid in set(table) - last - set(doomed) - {self.me}:
                verdict = self.judge(pid)
                # an exec takes milliseconds: a process that shows no environment for longer is not inside one
                if verdict is Verdict.DRIVER_ENV or (verdict is Verdict.EXECUTING
                                                     and now - executing.setdefault(pid, now) < EXEC_WINDOW_S):
                    pending.add(pid)
            before = set(self.seen)
            self.look(table)
            late = {pid: self.seen[pid] for pid in set(self.seen) - before}
            if late:
                killed += reap(late)
                doomed |= late
            if not pending:
                break
            time.sleep(0.05)
        return killed


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


def watch(driver_pid: int, driver_started: float, marker: str) -> None:
    run = Watch(driver_pid, driver_started, marker)
    told = False
    while True:
        table = _table()
        driver = table.get(driver_pid)
        # start times are read by two processes: allow for float noise, not for a recycled pid
        if driver is None or abs(driver[1] - driver_started) > 0.5:
            run.reap()
            return
        run.look(table)
        if run.ray_seen and not _alive(run.seen, table):
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
    import argparse

    parser = argparse.ArgumentParser(prog="python -m capeval.engine.ray_reaper", description=(
        "The local Ray watchdog (started by capeval.engine.ray_local): once the driver process is gone, end every Ray "
        "process it started."))
    parser.add_argument("driver_pid", type=int)
    parser.add_argument("driver_started", type=float, help="the driver's start time (tells a recycled pid apart)")
    parser.add_argument("temp_dir", help="the driver's Ray temp folder")
    args = parser.parse_args()
    watch(args.driver_pid, args.driver_started, args.temp_dir)
