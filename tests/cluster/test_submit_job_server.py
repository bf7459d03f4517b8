"""`capeval submit` against a loopback HTTP server that speaks the Ray job server's REST API (version, job list,
package upload, job submission) and requires a bearer token the way Ray's token auth does (401 without one, 403
for another; the same texts). Fast, no Ray cluster: the token must reach every request from RAY_AUTH_TOKEN alone
(no RAY_AUTH_MODE on the client), and each way the server refuses ends in one line with a non-zero exit code. The
same against a real token-auth Ray cluster: tests/cluster/test_submit_resume.py."""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from _ray_cluster import REPO, free_ports
from _sweeps import write_sweep

# what Ray 2.60's job head returns for a submission id in use: the agent's ValueError inside the head's traceback
DUPLICATE_BODY = """Traceback (most recent call last):
  File "ray/dashboard/modules/job/job_head.py", line 419, in submit_job
    resp = await job_agent_client.submit_job_internal(submit_request)
RuntimeError: Request failed with status code 400: Traceback (most recent call last):
  File "ray/dashboard/modules/job/job_manager.py", line 553, in submit_job
    raise ValueError(
ValueError: Job with submission_id {id} already exists. Please use a different submission_id.
."""
CRASH_BODY = """Traceback (most recent call last):
  File "ray/dashboard/modules/job/job_head.py", line 419, in submit_job
    resp = await job_agent_client.submit_job_internal(submit_request)
  File "ray/dashboard/modules/job/job_head.py", line 148, in submit_job_internal
    await self._raise_error(resp)
KeyError: 'node_id_of_the_agent'"""


class FakeJobServer:
    """Records every request (method, path, Authorization header, body); answers like Ray's job head."""

    def __init__(self, token: str | None, jobs: list[dict] | None = None, submit: tuple[int, str] | None = None):
        self.token, self.jobs, self.submit, self.seen = token, jobs or [], submit, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self, status: int, body: str | dict, ctype: str = "text/plain") -> None:
                data = (json.dumps(body) if isinstance(body, (dict, list)) else body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if isinstance(body, (dict, list)) else ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                auth = self.headers.get("Authorization")
                server.seen.append((self.command, self.path, auth, body))
                if server.token is not None:  # Ray's token_auth_middleware, same statuses and texts
                    if not auth:
                        return self._answer(401, "Unauthorized: Missing authentication token")
                    if auth != f"Bearer {server.token}":
                        return self._answer(403, "Forbidden: Invalid authentication token")
                if self.path == "/api/version":
                    return self._answer(200, {"version": "4", "ray_version": "2.60.0", "ray_commit": "x"})
                if self.command == "GET" and self.path == "/api/jobs/":
                    return self._answer(200, server.jobs)
                if self.path.startswith("/api/packages/"):
                    return self._answer(404 if self.command == "GET" else 200, "")
                if self.command == "POST" and self.path == "/api/jobs/":
                    sid = json.loads(body)["submission_id"]
                    if server.submit:
                        return self._answer(server.submit[0], server.submit[1].format(id=sid))
                    return self._answer(200, {"job_id": sid, "submission_id": sid})
                return self._answer(404, "not found")

            do_GET = do_POST = do_PUT = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def sweep(tmp_path) -> Path:
    return write_sweep(tmp_path / "sweeps", "fake-" + secrets.token_hex(3), n_videos=2, prompts=("brief",),
                       frames=("uniform:2",))


def _submit(sweep: Path, *args: str, token: str | None = None) -> subprocess.CompletedProcess:
    """The CLI in a process of its own: no RAY_* variable from this one (a local Ray may have set RAY_AUTH_MODE)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=os.environ.get("PYTHONPATH", ""), RAY_USAGE_STATS_ENABLED="0", **({"RAY_AUTH_TOKEN": token} if token else {}))
    return subprocess.run([sys.executable, "-m", "capeval.engine.cli", "submit", str(sweep), "--no-wait", *args],
                          cwd=sweep.parent, env=env, capture_output=True, text=True, timeout=180)


def _last_line(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_the_token_in_ray_auth_token_reaches_every_request_and_nothing_else(sweep):
    token = "tok-" + secrets.token_hex(16)
    server = FakeJobServer(token)
    try:
        proc = _submit(sweep, "--address", server.address, token=token)
    finally:
        server.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    paths = [(method, path) for method, path, _, _ in server.seen]
    assert ("GET", "/api/version") in paths and ("POST", "/api/jobs/") in paths
    assert any(method == "PUT" and path.startswith("/api/packages/") for method, path in paths)  # the staged sweep
    assert {auth for _, _, auth, _ in server.seen} == {f"Bearer {token}"}
    # only as the header: not in the uploaded working_dir, the job request (runtime_env, entrypoint) or any output
    assert all(token.encode() not in body for _, _, _, body in server.seen)
    uploads = [body for method, _, _, body in server.seen if method == "PUT"]
    for upload in uploads:  # the working_dir travels as a zip: look inside
        with zipfile.ZipFile(io.BytesIO(upload)) as z:
            assert any(n.endswith(".yaml") for n in z.namelist())
            assert all(token.encode() not in z.read(n) for n in z.namelist())
    assert token not in proc.stdout + proc.stderr
    assert "token from $RAY_AUTH_TOKEN" in proc.stderr
    submitted = json.loads(next(body for method, path, _, body in server.seen if method == "POST"))
    assert proc.stdout.strip() == submitted["submission_id"]


def test_no_token_and_a_wrong_token_are_refused_in_one_line(sweep):
    server = FakeJobServer("tok-" + secrets.token_hex(16))
    try:
        missing = _submit(sweep, "--address", server.address)
        wrong = _submit(sweep, "--address", server.address, token="not-the-token-0000")
    finally:
        server.close()
    for proc in (missing, wrong):
        assert proc.returncode == 4, proc.stderr[-3000:]  # ABORTED: authentication refused
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert "HTTP 401" in _last_line(missing) and "export RAY_AUTH_TOKEN=" in _last_line(missing)
    assert "HTTP 403" in _last_line(wrong) and "not this cluster's token" in _last_line(wrong)
    assert "not-the-token-0000" not in wrong.stderr + wrong.stdout
    assert not [s for s in server.seen if s[0] == "POST"]  # nothing was submitted


def test_a_500_with_a_traceback_is_one_line_and_verbose_shows_the_reply(sweep):
    server = FakeJobServer(None, submit=(500, CRASH_BODY))
    try:
        plain = _submit(sweep, "--address", server.address)
        verbose = _submit(sweep, "--address", server.address, "--verbose")
    finally:
        server.close()
    assert plain.returncode == verbose.returncode == 4
    line = _last_line(plain)
    assert "HTTP 500" in line and "KeyError: 'node_id_of_the_agent'" in line and "--verbose" in line
    assert "Traceback" not in plain.stderr and "job_head.py" not in plain.stderr
    assert "job_head.py" in verbose.stderr and _last_line(verbose) == line


def test_a_submission_id_in_use_is_explained(sweep):
    server = FakeJobServer(None, submit=(500, DUPLICATE_BODY))
    try:
        proc = _submit(sweep, "--address", server.address, "--submission-id", "capeval-mine")
    finally:
        server.close()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "already has a job with submission id capeval-mine" in _last_line(proc)
    assert "Traceback" not in proc.stderr


def test_an_unreachable_address_is_explained(sweep):
    proc = _submit(sweep, "--address", f"http://127.0.0.1:{free_ports(1)[0]}")
    assert proc.returncode == 4
    assert "cannot reach a Ray job server" in _last_line(proc) and "connection refused" in _last_line(proc)
    assert "Traceback" not in proc.stderr


def _dry_run(sweep: Path) -> dict:
    proc = _submit(sweep, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_the_default_remote_output_is_one_per_sweep_and_ids_move_on(sweep):
    first, again = _dry_run(sweep), _dry_run(sweep)
    assert first["remote_out"] == again["remote_out"]
    assert first["remote_out"].startswith(f"/tmp/capeval-jobs/{sweep.stem}-")
    assert f"--remote-out {first['remote_out']}" in first["entrypoint"]
    sweep.write_text(sweep.read_text().replace('"uniform:2"', '"uniform:3"'))
    assert _dry_run(sweep)["remote_out"] != first["remote_out"]  # another sweep: another folder
    base = _dry_run(sweep)["submission_id"]
    # earlier jobs of this sweep finished: the next free id, same output folder
    done = [{"type": "SUBMISSION", "submission_id": i, "status": s, "entrypoint": "x"}
            for i, s in ((base, "SUCCEEDED"), (base + "-1", "FAILED"), (base + "-x", "SUCCEEDED"))]
    server = FakeJobServer(None, jobs=done)
    try:
        proc = _submit(sweep, "--address", server.address)
    finally:
        server.close()
    assert proc.returncode == 0 and proc.stdout.strip() == base + "-2", proc.stderr[-2000:]
    # one still running: refused (two jobs would write into one folder)
    server = FakeJobServer(None, jobs=done + [{"type": "SUBMISSION", "submission_id": base + "-2",
                                                 "status": "RUNNING", "entrypoint": "x"}])
    try:
        proc = _submit(sweep, "--address", server.address)
    finally:
        server.close()
    assert proc.returncode == 2 and f"job {base}-2 of this sweep is still RUNNING" in _last_line(proc)
    assert not [s for s in server.seen if s[0] == "POST"]


def test_the_token_is_never_forwarded(sweep):
    proc = _submit(sweep, "--dry-run", "--forward-env", "RAY_AUTH_TOKEN", token="tok-" + secrets.token_hex(8))
    assert proc.returncode == 2 and "Ray's token is not forwarded" in proc.stderr
