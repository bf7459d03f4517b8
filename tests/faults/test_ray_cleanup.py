"""Issue 19 item 8: nothing capeval started outlives its run. A real driver (library init_ray + tasks, clean
environment) is killed with SIGKILL: within a bounded time no process of its Ray session (GCS, raylet,
DashboardAgent, RuntimeEnvAgent, workers, the watchdog) survives and none of its ports listens, while the Ray of
another driver on the same machine is left alone. A driver that exits normally leaves nothing behind either."""

from __future__ import annotations

import shutil
import signal
import time

from _ray_session import (kill_all, listening, listening_ports, session_processes, short_temp_dir, start_driver,
                          survivors, wait_until)

BOUND_S = 30
CORE = {"gcs_server", "raylet"}


def _session(driver):
    time.sleep(1.0)  # agents bind their ports shortly after start
    procs = session_processes(driver.pid)
    ports = {port for *_, port in listening(procs)}
    names = set(survivors(procs).values())
    assert {"gcs_server", "raylet"} <= names and any("Agent" in n for n in names), names
    return procs, ports


def test_kill_9_of_a_driver_leaves_no_process_or_port_of_its_ray_and_spares_another_ray():
    temps = [short_temp_dir(), short_temp_dir()]
    killed = start_driver(temps[0])
    other = start_driver(temps[1])
    killed_procs = other_procs = {}
    try:
        killed_procs, killed_ports = _session(killed)
        other_procs, other_ports = _session(other)
        killed.send_signal(signal.SIGKILL)  # the driver alone, as `kill -9 PID` of a sweep does
        t0 = time.monotonic()
        left = wait_until(lambda: not survivors(killed_procs) and not (killed_ports & listening_ports()), BOUND_S)
        took = time.monotonic() - t0
        assert left, (f"{BOUND_S}s after kill -9: alive {survivors(killed_procs)}, "
                      f"listening {sorted(killed_ports & listening_ports())}")
        print(f"killed driver's Ray gone {took:.1f}s after kill -9 ({len(killed_procs)} processes)")
        # (the other Ray's core processes and their ports: an idle worker may come and go on its own)
        core = {pid for pid, name in survivors(other_procs).items() if name in CORE or "Agent" in name}
        assert {"gcs_server", "raylet"} <= {survivors(other_procs)[p] for p in core}
        assert core <= survivors(other_procs).keys(), "another driver's Ray was killed"
        assert {port for pid, _, _, port in listening(core)} <= listening_ports(), "another Ray lost its ports"

        other.stdin.write("exit\n")  # the normal exit path: ray.shutdown at interpreter exit
        other.stdin.flush()
        assert other.wait(timeout=60) == 0, other.stderr.read()[-3000:]
        left = wait_until(lambda: not survivors(other_procs) and not (other_ports & listening_ports()), BOUND_S)
        assert left, (f"{BOUND_S}s after a normal exit: alive {survivors(other_procs)}, "
                      f"listening {sorted(other_ports & listening_ports())}")
    finally:
        for proc in (killed, other):
            proc.kill()
        kill_all(killed_procs)
        kill_all(other_procs)
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)


def test_kill_9_of_a_cli_sweep_leaves_nothing_of_its_ray(tmp_path):
    """The issue's own case: `capeval sweep` (python -m capeval.engine.cli, clean environment) killed with SIGKILL mid-run."""
    import subprocess
    import sys

    from _faults_support import sweep_text, synthetic
    from _ray_session import REPO, clean_env

    sweep = tmp_path / "tiny.toml"
    sweep.write_text(sweep_text(dataset=synthetic(n_videos=6, duration_s=2.0), prompts=("brief", "detailed")))
    cmd = [sys.executable, "-m", "capeval.engine.cli", "sweep", str(sweep), "--out", str(tmp_path / "out"), "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    procs: dict = {}
    try:
        def ray_up():  # the agents are the last of a Ray session to start
            procs.update(session_processes(proc.pid))
            names = set(survivors(procs).values())
            return {"gcs_server", "raylet"} <= names and sum("Agent" in n for n in names) == 2
        assert wait_until(ray_up, 120, interval=0.1), f"the sweep's Ray never came up: {survivors(procs)}"
        ports = {port for *_, port in listening(procs)}
        proc.send_signal(signal.SIGKILL)
        left = wait_until(lambda: not survivors(procs) and not (ports & listening_ports()), BOUND_S)
        assert left, (f"{BOUND_S}s after kill -9 of a sweep: alive {survivors(procs)}, "
                      f"listening {sorted(ports & listening_ports())}")
    finally:
        proc.kill()
        kill_all(procs)
