"""A real two-node Ray cluster on 127.0.0.1, started with `ray start` (a head with the job server, and a worker
node joining it with `--address`), every port chosen free so it never meets another Ray on the machine, and stopped
by killing exactly its own processes (never `ray stop`, which stops every Ray here): those whose command line names
its session folder or GCS address, and those started with its marker in their environment (the agents rename
themselves `ray::DashboardAgent`, the client server names neither; killing only the first kind left them running).

`ray start` runs through tests/cluster/_ray_start.py, which keeps both nodes' servers on 127.0.0.1 (see there)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = "CAPEVAL_TEST_CLUSTER"  # in the environment of every process of a cluster: its own value


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _node_ports() -> list[str]:
    (nm, om, agent, agent_grpc, rt_agent, metrics, client), lo = free_ports(7), free_ports(1)[0]
    lo = 20000 + (lo % 20000)  # a private worker-port window per node
    return [f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}", f"--runtime-env-agent-port={rt_agent}",
            f"--metrics-export-port={metrics}", f"--min-worker-port={lo}", f"--max-worker-port={lo + 200}"], client


class LocalCluster:
    """start() retries once: on a loaded machine a raylet can miss Ray's fixed 30 s registration window."""

    def __init__(self, cpus_per_node: int = 1, object_store_mb: int = 200, attempts: int = 2):
        for attempt in range(attempts):
            try:
                self._start(cpus_per_node, object_store_mb)
                return
            except RuntimeError:
                if attempt == attempts - 1:
                    raise

    def _start(self, cpus_per_node: int, object_store_mb: int) -> None:
        self.temp = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))  # short: Ray's socket paths are bounded
        gcs, dash = free_ports(2)
        self.gcs_address = f"127.0.0.1:{gcs}"
        self.dashboard = f"http://127.0.0.1:{dash}"
        self.marker = secrets.token_hex(8)
        self.env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0",
                        PATH=f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}", **{MARKER: self.marker})
        self.env.pop("RAY_ADDRESS", None)
        # token auth with a token of this cluster's own (not ~/.ray/auth_token, shared with every local Ray here)
        self.env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
        ray = [str(REPO / ".venv" / "bin" / "python"), str(Path(__file__).with_name("_ray_start.py"))]
        common = ["--node-ip-address=127.0.0.1", f"--num-cpus={cpus_per_node}",
                  f"--object-store-memory={object_store_mb * 1024 * 1024}", "--disable-usage-stats"]
        head_ports, client = _node_ports()
        self._run([*ray, "start", "--head", f"--port={gcs}", f"--temp-dir={self.temp}", "--include-dashboard=true",
                   "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--ray-client-server-port={client}",
                   *common, *head_ports])
        worker_ports, _ = _node_ports()
        self._run([*ray, "start", f"--address={self.gcs_address}", *common, *worker_ports])
        self._wait_ready()

    def _run(self, cmd: list[str]) -> None:
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=180)
        if proc.returncode != 0:
            self.stop()
            raise RuntimeError(f"{' '.join(cmd[:3])} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    def _wait_ready(self, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self._request("/api/version"), timeout=5) as r:
                    if r.status == 200 and self.alive_nodes() >= 2:
                        return
            except OSError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError("the local Ray cluster did not come up (job server or second node missing)")

    def _request(self, path: str) -> urllib.request.Request:
        return urllib.request.Request(self.dashboard + path,
                                      headers={"Authorization": f"Bearer {self.env['RAY_AUTH_TOKEN']}"})

    def alive_nodes(self) -> int:
        import json

        try:
            with urllib.request.urlopen(self._request("/nodes?view=summary"), timeout=5) as r:
                data = json.load(r)
        except (OSError, ValueError):
            return 0
        nodes = data.get("data", {}).get("summary", [])
        return sum(1 for n in nodes if n.get("raylet", {}).get("state") == "ALIVE")

    def pids(self) -> list[int]:
        """Processes of this cluster: their command line names its session folder (or its GCS address), or their
        environment holds its marker."""
        mine = []
        marks = (str(self.temp).encode(), self.gcs_address.encode())
        marker = f"{MARKER}={self.marker}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes() if not any(m in cmdline for m in marks) else b""
            except OSError:
                continue
            if any(m in cmdline for m in marks) or marker in environ.split(b"\0"):
                mine.append(int(entry.name))
        return mine

    def listening(self) -> list[tuple[int, str, str, int]]:
        """(pid, name, ip, port) of every listening TCP socket of this cluster's processes."""
        import psutil

        found = []
        for pid in self.pids():
            try:
                proc = psutil.Process(pid)
                found += [(pid, proc.name(), c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                          if c.status == psutil.CONN_LISTEN]
            except psutil.Error:
                continue
        return found

    def stop(self) -> None:
        """SIGKILL at once: on SIGTERM the GCS and the raylets take ~16 s to exit (`ray stop`'s grace period), and a
        test cluster's end needs no grace. A second round catches a process started while the first was sent."""
        for _ in range(2):
            pids = self.pids()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.time() + 15
            while pids and time.time() < deadline:
                pids = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
                time.sleep(0.3)
            if not pids:
                break
        shutil.rmtree(self.temp, ignore_errors=True)


def _zombie(pid: int) -> bool:
    try:
        return " Z " in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
