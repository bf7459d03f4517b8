"""One writer, loopback only, clear storage errors (issue 8, findings 5, 6 and 8).

A running sweep holds its output folder: a second sweep on it is refused (exit 4) naming the holder's PID and host;
its local Ray listens on loopback addresses only, and Ray's start-up lines and model loaders' bars stay out of the
terminal. A read-only
output folder is refused before any work (exit 2); a store that runs out of space stops the run with one line
naming the file and what was written (exit 4), leaving nothing half-written."""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
import sys
import time

import psutil
import pytest

from _faults_support import REPO, cli_env, finish, reap, start_capeval, sweep, sweep_text, synthetic, wait_for
from capeval.engine import exitcodes
from capeval.engine.store.lock import LOCK_NAME, FolderLock


def _is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def _bound_addresses(root: psutil.Process) -> set[tuple[str, str, int]]:
    """(process name, ip, port) of every listening TCP socket and bound UDP socket of `root` and its descendants."""
    found = set()
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return found
    for p in procs:
        try:
            for c in p.net_connections(kind="inet"):
                if (c.type == socket.SOCK_STREAM and c.status == psutil.CONN_LISTEN) or (
                        c.type == socket.SOCK_DGRAM and c.laddr):
                    found.add((p.name(), c.laddr.ip, c.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_running_sweep_is_loopback_only_quiet_and_holds_its_folder(tmp_path, sweep_file):
    path = sweep_file(sweep_text(dataset=synthetic(3), frames=("uniform:2", "uniform:4")))
    out = tmp_path / "out"
    first = start_capeval(["sweep", path, "--out", out, "--no-progress"])
    try:
        holder = wait_for(lambda: (out / LOCK_NAME).exists() and (out / LOCK_NAME).read_text().strip(), 60,
                          "the first sweep to take the lock")
        assert json.loads(holder)["pid"] == first.pid
        second = sweep(path, out)
        assert second.returncode == exitcodes.ABORTED, second
        assert f"PID {first.pid} on host {socket.gethostname()}" in second.stderr
        assert "Traceback" not in second.stderr
        # sample the listening sockets of everything the first sweep started, while it runs
        root = psutil.Process(first.pid)
        seen: set = set()
        while first.poll() is None:
            seen |= _bound_addresses(root)
            time.sleep(0.3)
        run = finish(first)
    finally:
        reap(first)
    assert run.returncode == exitcodes.OK, run
    names = {name for name, _, _ in seen}
    assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), seen  # Ray was observed
    outside = {s for s in seen if not _is_loopback(s[1])}
    assert not outside, f"sockets bound beyond loopback: {sorted(outside)}"
    # Ray's start-up lines (the token-auth warning, "Started a local Ray instance") stay out of the terminal
    assert "Token authentication" not in run.stderr and "Started a local Ray instance" not in run.stderr, run.stderr
    assert "Loading weights" not in run.stderr  # nor the model loaders' bars (the local judge loads MiniLM)
    with FolderLock(out):  # released when the holder ended
        pass


def test_lock_of_a_killed_run_does_not_block(tmp_path):
    code = ("import sys, time; from capeval.engine.store.lock import FolderLock; l = FolderLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); time.sleep(60)")
    # REPO/cli_env come from this folder's conftest, imported at load time: a bare "conftest" looked up at run time
    # is whichever conftest pytest imported last.
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO, env=cli_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Exception, match=f"PID {holder.pid}"):
            FolderLock(tmp_path).acquire()
        holder.kill()  # kill -9: the kernel drops the lock
        holder.wait(timeout=30)
        FolderLock(tmp_path).acquire().release()
    finally:
        holder.kill()


def _namespace_mount(target, options: str) -> list[str]:
    if not shutil.which("unshare"):
        pytest.skip("needs unshare(1)")
    script = f'mkdir -p "{target}" && mount -t tmpfs -o {options} tmpfs "{target}" && "$@"; rc=$?; ' \
             f'ls -A "{target}" > "{target}.listing" 2>&1; exit $rc'
    prefix = ["unshare", "-r", "-m", "sh", "-c", script, "sh"]
    if subprocess.run(prefix + ["true"], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs in a user namespace here")
    return prefix


def test_read_only_output_folder_is_refused_before_any_work(tmp_path, sweep_file):
    path = sweep_file(sweep_text(dataset=synthetic(1)))
    out = tmp_path / "ro"
    run = sweep(path, out, prefix=_namespace_mount(out, "ro,size=64k"))
    assert run.returncode == exitcodes.USAGE, run
    lines = [l for l in run.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and str(out) in lines[0], run.stderr
    assert "Read-only file system" in lines[0] or "not writable" in lines[0], run.stderr
    assert not (tmp_path / "ro.listing").read_text().strip()  # nothing was written into it


@pytest.mark.slow
def test_full_store_stops_the_run_with_one_line_and_nothing_half_written(tmp_path, sweep_file):
    path = sweep_file(sweep_text(dataset=synthetic(2)))
    out = tmp_path / "out"
    verdicts = out / "verdicts"
    run = sweep(path, out, prefix=_namespace_mount(verdicts, "size=4k"))
    assert run.returncode == exitcodes.ABORTED, run
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("capeval sweep: aborted: cannot write") and "rows of verdicts/" in last, run.stderr
    assert str(verdicts) in last and "no space left on the device" in last
    assert "Traceback" not in run.stderr
    assert (tmp_path / "out" / "verdicts.listing").read_text() == ""  # no segment, no temp file left in the store
    assert not (out / "metrics").exists() or not list((out / "metrics").glob("*"))  # nothing committed
