"""How `capeval submit` talks to a Ray cluster's job server: the token it sends, the submission id it picks, and a
one-line explanation (what failed, the likely cause, what to do) for each way the server or the network refuses.

Token: Ray's token authentication (Ray >= 2.52, `RAY_AUTH_MODE=token` on the cluster) wants every request to the job
server to carry `Authorization: Bearer <token>`. Ray's own client adds that header only when this process also runs
with `RAY_AUTH_MODE=token`; a user who exported just the token got a 401 that surfaced as an internal error. So the
token is read here from the variables Ray documents, `RAY_AUTH_TOKEN` (or the file `RAY_AUTH_TOKEN_PATH` names, on
this machine), and handed to JobSubmissionClient as that header, whatever `RAY_AUTH_MODE` says. It goes into no
staged file, runtime_env, run record or log line: the job's own processes use the token the cluster's nodes hold.

Errors: Ray's client raises AuthenticationError (401/403), ConnectionError (nothing listening), or RuntimeError
"Request failed with status code N: <body>", where a 500's body is the server's Python traceback (a submission id
that exists comes back that way, the agent's ValueError nested in the head's traceback). `JobServerError` says in
one line what failed and what to do; the raw reply is kept on the error (`raw`) for `--verbose`.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from capeval.engine import exitcodes
from capeval.engine.errors import CapevalError, UsageError
from capeval.engine.secrets import redact_text, remember_secret

TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
#: variables --forward-env refuses: the token travels only as the request header (the cluster holds its own)
AUTH_ENV = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")
GET_TOKEN_HINT = "`ray get-auth-token` on the head node prints it"
_STATUS = re.compile(r"status code (\d{3}): ?(.*)", re.DOTALL)
_EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Timeout|Exit)): ?(.*)$")


@dataclass(frozen=True)
class Auth:
    headers: dict[str, str] = field(default_factory=dict)
    source: str | None = None  # where the token came from, for messages; None: capeval sends none itself


def auth_from_env(environ=None) -> Auth:
    """The Authorization header for the token in $RAY_AUTH_TOKEN (else in the file $RAY_AUTH_TOKEN_PATH names)."""
    environ = os.environ if environ is None else environ
    token, source = (environ.get(TOKEN_ENV) or "").strip(), f"${TOKEN_ENV}"
    if not token and environ.get(TOKEN_PATH_ENV):
        path = Path(environ[TOKEN_PATH_ENV]).expanduser()
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise UsageError(f"${TOKEN_PATH_ENV} names {path}, which cannot be read ({exc.strerror or exc}); "
                             f"point it at the cluster's token file or export {TOKEN_ENV} instead") from None
        source = f"the file ${TOKEN_PATH_ENV} names ({path})"
    if not token:
        return Auth()
    remember_secret(token)  # blanked from every message and log line of this process
    return Auth({"Authorization": f"Bearer {token}"}, source)


class JobServerError(CapevalError):
    """The job server (or the way to it) refused; the message is one line, `raw` the server's own text."""

    def __init__(self, message: str, exit_code: int = exitcodes.ABORTED, raw: str = ""):
        super().__init__(message)
        self.exit_code = exit_code
        self.raw = raw


def _cause(body: str) -> str:
    """The last `SomeError: message` line of a traceback (the innermost cause), else the body's first line."""
    lines = [line for line in body.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        m = _EXCEPTION_LINE.match(line)
        if m and not line.startswith((" ", "\t")):
            text = f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}".rstrip(": .")
            return text if len(text) <= 200 else text[:197] + "..."
    first = lines[0].strip() if lines else "(empty reply)"
    return first if len(first) <= 200 else first[:197] + "..."


def _status_of(exc: BaseException) -> tuple[int | None, str]:
    """(HTTP status, body) of an error Ray's client or aiohttp raised, (None, text) when it carries none."""
    text = str(exc)
    status = getattr(exc, "status", None)  # aiohttp's ClientResponseError (the log stream's websocket)
    if isinstance(status, int):
        return status, getattr(exc, "message", "") or text
    if text.startswith("Authentication required"):
        return 401, text
    if text.startswith("Authentication failed"):
        return 403, text
    m = _STATUS.search(text)
    return (int(m.group(1)), m.group(2).rstrip(".")) if m else (None, text)


def _unreachable(exc: BaseException) -> str | None:
    """Why nothing answered ("connection refused", "timed out", "host not found"), None for other errors."""
    kinds: list[type] = [ConnectionError, TimeoutError]
    try:
        import requests

        kinds += [requests.ConnectionError, requests.Timeout]
    except ImportError:  # pragma: no cover - ray[default] brings requests
        pass
    try:
        import aiohttp

        kinds.append(aiohttp.ClientConnectionError)  # the log stream's websocket
    except ImportError:  # pragma: no cover
        pass
    if not isinstance(exc, tuple(kinds)):
        return None
    chain, e = [], exc
    while e is not None and len(chain) < 8:  # Ray's ConnectionError says little; its cause says why
        chain.append(str(e).lower())
        e = e.__cause__ or e.__context__
    text = " ".join(chain)
    if "refused" in text:
        return "connection refused"
    if "name or service not known" in text or "name resolution" in text or "nodename nor servname" in text:
        return "host name not found"
    if "timed out" in text or "timeout" in text or isinstance(exc, TimeoutError):
        return "timed out"
    return type(exc).__name__


def explain(exc: BaseException, *, address: str, action: str, auth: Auth, job_id: str | None = None,
            remote_out: str | None = None) -> JobServerError | None:
    """One line for an error from the job server or the network; None for anything else (a bug: re-raised)."""
    status, body = _status_of(exc)
    raw = body if status is not None else str(exc)
    if status == 401:
        return JobServerError(f"{action} at {address}: refused (HTTP 401): the cluster has token authentication on "
                              f"and no token was sent; export {TOKEN_ENV}=<the cluster's token> ({GET_TOKEN_HINT}) "
                              "and rerun", raw=raw)
    if status == 403:
        source = auth.source or ("Ray's default token file (~/.ray/auth_token)"
                                 if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" else "this machine")
        return JobServerError(f"{action} at {address}: refused (HTTP 403): the token from {source} is not this "
                              f"cluster's token; set {TOKEN_ENV} to the token the cluster was started with "
                              f"({GET_TOKEN_HINT}) and rerun", raw=raw)
    if status is not None and "already exists" in body and job_id:
        return JobServerError(f"{action} at {address}: the cluster already has a job with submission id {job_id}; "
                              "rerun without --submission-id/--resubmit (the next free id is picked and the job "
                              f"resumes from {remote_out or 'its output folder'}), or pass another --resubmit N",
                              exitcodes.USAGE, raw=raw)
    if status == 404 and "Version check" in body:
        return JobServerError(f"{action}: {address} answered but is not a Ray job server (HTTP 404 on "
                              "/api/version); --address must name the dashboard's port (8265 by default)", raw=raw)
    if status is not None:
        side = ("an error on the cluster's side: the head node's dashboard logs "
                "(/tmp/ray/session_latest/logs/dashboard*.log) have the details" if status >= 500 else
                "the job server refused the request")
        return JobServerError(f"{action} at {address}: the job server failed (HTTP {status}: {_cause(body)}); "
                              f"{side}; rerun with --verbose for its full reply", raw=raw)
    why = _unreachable(exc)
    if why:
        return JobServerError(f"{action}: cannot reach a Ray job server at {address} ({why}); check "
                              "that the cluster is up and that --address (or RAY_ADDRESS) names its dashboard, e.g. "
                              "http://HEAD:8265 (for a remote cluster, a tunnel such as `ray dashboard "
                              "CLUSTER.yaml`)", raw=raw)
    return None


class JobServer:
    """Calls to the job server, each inside `step(action)` so that its errors become one-line JobServerErrors."""

    def __init__(self, address: str, auth: Auth, *, verbose: bool = False, show=print):
        self.address, self.auth, self.verbose, self.show = address, auth, verbose, show
        self.job_id: str | None = None
        self.remote_out: str | None = None
        self.client = None

    @contextmanager
    def step(self, action: str):
        try:
            yield
        except JobServerError:
            raise
        except Exception as exc:  # noqa: BLE001 - explained or re-raised unchanged
            error = explain(exc, address=self.address, action=action, auth=self.auth, job_id=self.job_id,
                            remote_out=self.remote_out)
            if error is None:
                raise
            if self.verbose and error.raw:
                self.show(f"[submit] the job server's reply ({type(exc).__name__}):\n{redact_text(error.raw)}")
            raise error from None

    def connect(self):
        from ray.job_submission import JobSubmissionClient

        with self.step("connecting to the job server"):
            self.client = JobSubmissionClient(self.address, headers=dict(self.auth.headers))
        return self.client

    def free_submission_id(self, base: str) -> str:
        """`base`, else `base-1`, `base-2`, ...: the first id no job on the cluster has. A job of this sweep that is
        still running is an error (two jobs would write into one output folder)."""
        with self.step("listing the cluster's jobs"):
            jobs = self.client.list_jobs()
        ours = {j.submission_id: j for j in jobs if j.submission_id == base or (
            (j.submission_id or "").startswith(base + "-") and j.submission_id[len(base) + 1:].isdigit())}
        running = sorted(i for i, j in ours.items() if not j.status.is_terminal())
        if running:
            job = running[0]
            raise JobServerError(f"job {job} of this sweep is still {ours[job].status.value} on {self.address} and "
                                 f"writes to {self.remote_out}; follow it with `ray job logs -f {job}`, or stop it "
                                 f"(`ray job stop {job}`) and rerun: the new job resumes from that folder",
                                 exitcodes.USAGE)
        if base not in ours:
            return base
        n = 1
        while f"{base}-{n}" in ours:
            n += 1
        return f"{base}-{n}"
