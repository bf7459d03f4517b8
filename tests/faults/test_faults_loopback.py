"""Issue 19 item 1: a local Ray started by capeval is private by construction. From a clean environment (none of
the suite's Ray settings, in particular no RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER), every listening socket of every
process of the run's Ray session (driver, GCS, raylet, agents, workers) is bound to loopback."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

from _faults_support import sweep_text, synthetic
from _ray_session import (REPO, clean_env, is_loopback, kill_all, listening, session_processes, short_temp_dir,
                          start_driver)


def test_library_init_ray_listens_on_loopback_only_from_a_clean_environment():
    temp = short_temp_dir()
    driver = start_driver(temp)
    procs = {}
    try:
        time.sleep(1.0)  # the agents finish binding their metrics/gRPC ports shortly after start
        procs = session_processes(driver.pid)
        sockets = listening(procs)
        names = {name for _, name, _, _ in sockets}
        assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), sockets
        exposed = [s for s in sockets if not is_loopback(s[2])]
        assert not exposed, f"listening beyond loopback: {exposed}"
    finally:
        driver.kill()
        kill_all(procs)
        shutil.rmtree(temp, ignore_errors=True)


def test_cli_sweep_listens_on_loopback_only_from_a_clean_environment(tmp_path):
    sweep = tmp_path / "tiny.toml"
    sweep.write_text(sweep_text(dataset=synthetic(n_videos=2, duration_s=1.0)))
    cmd = [sys.executable, "-m", "capeval.engine.cli", "sweep", str(sweep), "--out", str(tmp_path / "out"), "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    seen, sockets = {}, set()
    try:
        while proc.poll() is None:  # sample the run's sockets for as long as it runs
            try:
                now = session_processes(proc.pid)
            except Exception:  # noqa: BLE001 - the driver may exit between poll() and the look
                break
            seen.update(now)
            sockets.update(listening(now))
            time.sleep(0.2)
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        assert any("gcs_server" in name for _, name, _, _ in sockets), f"never saw the run's Ray: {sockets}"
        exposed = sorted(s for s in sockets if not is_loopback(s[2]))
        assert not exposed, f"listening beyond loopback: {exposed}"
    finally:
        proc.kill()
        kill_all(seen)
