"""`capeval submit FILE`: run a sweep as a Ray Job on a running cluster, stream its logs, fetch its results.

    capeval submit examples/capquiz_vllm_gpu.toml --address http://HEAD:8265 --out runs/gpu
    capeval submit sweep.toml --remote-out /shared/runs/gpu      # results also kept on shared storage (resumable)

The sweep file may sit anywhere. It is validated here first, then staged into a temporary working_dir by
engine/staging.py: only its declared path fields (dataset paths, caption files, prompt files and packs, replay
replies) and the media its datasets' own loaders list are copied, each from under an allowed root (the sweep's
folder, the dataset folders, `--allow-root`), the total checked against the cap before any copy; every shipped
file is printed and listed in SHIPPED.txt beside the staged sweep. A credential value in the sweep is refused: the
sweep names an environment variable (`api_key_env`) resolved on the cluster, and `--forward-env NAME` sends this
machine's value with the job in Ray's runtime_env env_vars (never in a staged file). The job runs `capeval submit --job-side`,
which runs the sweep against the cluster (Ray sets RAY_ADDRESS for a job's driver) and, at the end, prints its
result files (results table, run record, metrics, verdicts, captions) into the job log as a base64 tarball between
marker lines. The client streams the log without those lines and unpacks the tarball into `--out`: no shared
filesystem is needed to get results back. `ray job submit` needs `ray[default]` on the client and cluster.

Resuming: the job's output folder (and with it the judgment cache, frames and finished cells) is the same for every
submission of the same sweep file: `--remote-out`, by default /tmp/capeval-jobs/<sweep name>-<digest of the sweep
file> on the node running the job's driver. Each submission gets a new submission id (the derived one, else the
first free `-N` after it; `--resubmit N` picks N), so submitting again resumes: finished cells are found by content
key and judged requests come from the judgment cache: no finished judgment is requested again.

Token authentication (Ray's `RAY_AUTH_MODE=token` on the cluster): export the cluster's token as RAY_AUTH_TOKEN
(or RAY_AUTH_TOKEN_PATH=<file holding it>) on this machine; it is sent to the job server as Ray's
`Authorization: Bearer` header, never shipped, forwarded or written (engine/cli/submit_job_server.py). A refused
token, an unreachable address, a submission id in use or a job-server failure ends the command with one line that
says what to do (`--verbose` prints the server's full reply).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

# staging (what is shipped, checked before any copy) lives in engine/staging.py; stage_sweep is re-exported
from capeval.engine.cli.submit_job_server import AUTH_ENV, JobServer, auth_from_env
from capeval.engine.errors import UsageError
from capeval.engine.runrecord import RUN_RECORD
from capeval.engine.safetext import for_terminal
from capeval.engine.secrets import REDACTED, remember_secret
from capeval.engine.staging import MAX_SHIPPED_BYTES, SHIPPED_LIST, plan_staging, stage_sweep, write_staging  # noqa: F401
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

#: the job's output folder on the cluster when --remote-out is not given: <sweep name>-<digest> below it
REMOTE_OUT_ROOT = "/tmp/capeval-jobs"

BEGIN, END = "@@capeval-results-begin@@", "@@capeval-results-end@@"
#: what the job sends back (frames, videos and the judge cache stay on the cluster)
RESULT_ENTRIES = ("results.parquet", "results.csv", "run.json", "metrics", "verdicts", "captions")


def register(sub) -> None:
    p = sub.add_parser("submit", help="run a sweep as a Ray Job on a cluster; stream logs; fetch the results",
                       epilog="Clusters with Ray token authentication (RAY_AUTH_MODE=token): export RAY_AUTH_TOKEN="
                              "<the cluster's token> (`ray get-auth-token` on the head node prints it), or "
                              "RAY_AUTH_TOKEN_PATH=<a file on this machine holding it); it is sent only as the job "
                              "server's Authorization header. Submitting the same sweep again resumes it: the job "
                              "writes to the same --remote-out, so finished cells and judgments are not redone.")
    p.add_argument("file", type=Path, help="sweep file (.toml/.yaml), anywhere on this machine")
    p.add_argument("--address", help="the cluster's job server, e.g. http://HEAD:8265 (default: RAY_ADDRESS, "
                                     "else http://127.0.0.1:8265)")
    p.add_argument("--out", type=Path, help="local folder for the fetched results (default: runs/<sweep name>)")
    p.add_argument("--remote-out", help="output folder on the cluster, the same for every submission of this sweep "
                                        "so that a resubmission resumes (on a multi-node cluster: shared storage); "
                                        f"default: {REMOTE_OUT_ROOT}/<sweep name>-<digest of the sweep file> on the "
                                        "node running the job's driver")
    p.add_argument("--no-ship-data", action="store_true",
                   help="do not copy the paths the sweep names: they exist on the cluster at the same paths")
    p.add_argument("--allow-root", action="append", default=[], metavar="DIR",
                   help="a folder files may be shipped from, besides the sweep's folder and the dataset folders "
                        "(repeatable)")
    p.add_argument("--forward-env", action="append", default=[], metavar="NAME",
                   help="send this machine's value of environment variable NAME (e.g. the one a judge's "
                        "api_key_env names) to the job in Ray's runtime_env env_vars; visible to whoever can "
                        "read the cluster's job list (repeatable)")
    p.add_argument("--max-ship-mib", type=float, default=MAX_SHIPPED_BYTES / 2**20,
                   help="refuse to ship more than this many MiB (default: %(default).0f)")
    p.add_argument("--python", default="python", help="python executable on the cluster (default: python)")
    p.add_argument("--submission-id", help="job id (default: derived from the sweep file and --remote-out, with "
                                           "-1, -2, ... appended when the cluster has jobs of that id)")
    p.add_argument("--resubmit", type=int, default=0, metavar="N",
                   help="append -N to the derived submission id instead of picking the first free one; the job "
                        "still resumes from the same --remote-out")
    p.add_argument("--no-wait", action="store_true", help="return after submitting (fetch nothing)")
    p.add_argument("--dry-run", action="store_true", help="stage and print the job, submit nothing")
    p.add_argument("--job-side", action="store_true", help=argparse.SUPPRESS)  # what the job itself runs
    p.add_argument("--secret-env", action="append", default=[], help=argparse.SUPPRESS)  # forwarded names
    p.add_argument("--verbose", action="store_true", help="print the job server's full reply when it refuses or fails")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def submission_id(sweep: Path, remote_out: str | None, resubmit: int) -> str:
    digest = hashlib.sha256(sweep.read_bytes() + f"|{remote_out}".encode()).hexdigest()[:10]
    return f"capeval-{sweep.stem}-{digest}" + (f"-{resubmit}" if resubmit else "")


def default_remote_out(sweep: Path, name: str) -> str:
    """The job's output folder when --remote-out is not given: one per sweep name and sweep file content, so every
    submission of the same sweep finds the cells, captions and judgments the earlier ones finished."""
    digest = hashlib.sha256(sweep.read_bytes()).hexdigest()[:10]
    return f"{REMOTE_OUT_ROOT}/{re.sub(r'[^A-Za-z0-9._-]+', '_', name).strip('._') or 'sweep'}-{digest}"


# ---- the job side: run the sweep, print the results into the log -------------------------------------------


def pack_results(out_dir: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in RESULT_ENTRIES:
            if (out_dir / name).exists():
                tar.add(out_dir / name, arcname=name)
    return buf.getvalue()


def job_side(args) -> int:
    for name in args.secret_env:  # forwarded credentials: blanked from every record and log line of this job
        remember_secret(os.environ.get(name))
    # Absolute, and outside the job's working_dir: Ray manages (and may clean up) that folder, and decode and
    # caption workers run in folders of their own. The inputs are copied beside the results for the same reason.
    out = Path(args.remote_out or Path(tempfile.gettempdir()) / "capeval-jobs" / "job").resolve()
    inputs = out / "submitted"
    shutil.copytree(Path.cwd(), inputs, dirs_exist_ok=True)
    # Work from the copy: Ray may remove the working_dir while the job's own Ray session runs, and libraries that
    # resolve paths against the current folder (model loaders) then fail with a bare FileNotFoundError.
    os.chdir(inputs)
    config = load_sweep(inputs / args.file)
    result = run_sweep(config, out, progress=False)
    print(result.summary(), file=sys.stderr, flush=True)
    sys.stderr.flush()
    payload = base64.b64encode(pack_results(out)).decode()
    lines = [BEGIN] + [payload[i:i + 4000] for i in range(0, len(payload), 4000)] + [END]
    print("\n".join(lines), flush=True)
    return 0


# ---- the client side -----------------------------------------------------------------------------------------


def extract_payload(logs: str) -> bytes | None:
    if BEGIN not in logs or END not in logs:
        return None
    body = logs[logs.rindex(BEGIN) + len(BEGIN):logs.rindex(END)]
    return base64.b64decode("".join(body.split()))


def unpack_results(payload: bytes, out: Path) -> None:
    """Unpack into `out`; segments are keyed by content (same name = same rows); run records are merged."""
    out.mkdir(parents=True, exist_ok=True)
    local_runs = []
    if (out / RUN_RECORD).is_file():
        local_runs = json.loads((out / RUN_RECORD).read_text()).get("runs", [])
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as tar:
        tar.extractall(out, filter="data")
    if local_runs and (out / RUN_RECORD).is_file():
        remote = json.loads((out / RUN_RECORD).read_text()).get("runs", [])
        seen = {(r.get("finished_at"), (r.get("host") or {}).get("hostname")) for r in local_runs}
        merged = local_runs + [r for r in remote if (r.get("finished_at"), (r.get("host") or {}).get("hostname"))
                               not in seen]
        (out / RUN_RECORD).write_text(json.dumps({"runs": merged}, indent=2) + "\n")


def _stream(client, job_id: str, show) -> None:
    """Print the job's log as it grows, without the result lines."""
    import asyncio

    async def tail():
        inside = False
        async for chunk in client.tail_job_logs(job_id):
            for line in chunk.splitlines():
                if line.strip() == BEGIN:
                    inside = True
                elif line.strip() == END:
                    inside = False
                elif not inside:
                    show(line)

    asyncio.run(tail())


def _forwarded_env(names: list[str]) -> dict[str, str]:
    auth = [n for n in names if n in AUTH_ENV]
    if auth:
        raise UsageError(f"--forward-env {', '.join(auth)}: Ray's token is not forwarded: the cluster's nodes hold "
                         "their own, and this machine's RAY_AUTH_TOKEN is sent only as the request header")
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        raise UsageError(f"--forward-env: {', '.join(missing)} not set on this machine")
    return {n: os.environ[n] for n in names}


def _print_plan(plan, forwarded: dict) -> None:
    for f in plan.files:
        print(f"[submit]   ships {for_terminal(str(f.source))} as {f.staged} ({f.size} bytes)", file=sys.stderr)
    for rel in plan.rewritten:
        print(f"[submit]   ships {rel} (the items table, media paths pointing at the shipped media)", file=sys.stderr)
    print(f"[submit]   {len(plan.files) + len(plan.rewritten)} files, {plan.total_bytes} bytes; "
          f"list in {SHIPPED_LIST} beside the staged sweep", file=sys.stderr)
    for name in forwarded:
        print(f"[submit]   forwards ${name} in the job's runtime_env (visible in the cluster's job list)",
              file=sys.stderr)


def job_server_address(given: str | None) -> str:
    address = given or os.environ.get("RAY_ADDRESS") or "http://127.0.0.1:8265"
    if not address.startswith("http"):  # a GCS address (HOST:6379) or ray://: the job server is the dashboard
        address = "http://" + address.split("://")[-1].rsplit(":", 1)[0] + ":8265"
    return address


def run(args) -> int:
    if args.job_side:
        return job_side(args)
    config = load_sweep(args.file)  # fail here, with file/line/field, not on the cluster
    forwarded = _forwarded_env(args.forward_env)
    # decided and checked (credentials, roots, size) before anything is copied
    plan = plan_staging(args.file, allow_roots=args.allow_root, ship_data=not args.no_ship_data,
                        max_bytes=int(args.max_ship_mib * 2**20))
    staging = Path(tempfile.mkdtemp(prefix="capeval-submit-"))
    try:
        staged = write_staging(plan, staging)
        remote_out = args.remote_out or default_remote_out(args.file, config.name)
        derived_id = args.submission_id or submission_id(args.file, args.remote_out, args.resubmit)
        entry = [args.python, "-m", "capeval.engine.cli", "submit", "--job-side", staged.name, "--remote-out", remote_out]
        for name in forwarded:
            entry += ["--secret-env", name]
        import shlex

        entrypoint = shlex.join(entry)
        runtime_env = {"working_dir": str(staging)}
        if forwarded:  # values only here, in the job's runtime_env; never in a staged file
            runtime_env["env_vars"] = forwarded
        print(f"[submit] {args.file} -> output {remote_out} on the cluster: {entrypoint}", file=sys.stderr)
        _print_plan(plan, forwarded)
        if args.dry_run:
            shown = {**runtime_env, **({"env_vars": {n: REDACTED for n in forwarded}} if forwarded else {})}
            print(json.dumps({"submission_id": derived_id, "remote_out": remote_out, "entrypoint": entrypoint,
                              "runtime_env": shown,
                              "shipped": [[str(f.source), f.staged] for f in plan.files] + [
                                  ["(rewritten)", rel] for rel in plan.rewritten]}, indent=1))
            return 0
        return _submit_and_fetch(args, config.name, entrypoint, runtime_env, derived_id, remote_out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _submit_and_fetch(args, name: str, entrypoint: str, runtime_env: dict, derived_id: str, remote_out: str) -> int:
    from ray.job_submission import JobStatus

    address = job_server_address(args.address)
    auth = auth_from_env()
    server = JobServer(address, auth, verbose=args.verbose, show=lambda m: print(m, file=sys.stderr, flush=True))
    server.remote_out = remote_out
    client = server.connect()
    explicit = bool(args.submission_id or args.resubmit)  # a chosen id that exists is the user's to change
    job_id = server.job_id = derived_id if explicit else server.free_submission_id(derived_id)
    with server.step(f"submitting job {job_id}"):
        client.submit_job(entrypoint=entrypoint, submission_id=job_id, runtime_env=runtime_env)
    print(f"[submit] submitted {job_id} to {address}" + (f" (token from {auth.source})" if auth.source else ""),
          file=sys.stderr)
    if args.no_wait:
        print(job_id)
        return 0
    with server.step(f"following job {job_id}"):
        _stream(client, job_id, lambda line: print(line, file=sys.stderr, flush=True))
        status = client.get_job_status(job_id)
        while status not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            time.sleep(1)
            status = client.get_job_status(job_id)
        if status != JobStatus.SUCCEEDED:
            info = client.get_job_info(job_id)
            print(f"[submit] job {job_id} {status.value}: {info.message}", file=sys.stderr)
            return 1
        logs = client.get_job_logs(job_id)
    payload = extract_payload(logs)
    if payload is None:
        print(f"[submit] job {job_id} succeeded but its log holds no results", file=sys.stderr)
        return 1
    out = args.out or Path("runs") / name
    unpack_results(payload, out)
    print(f"[submit] job {job_id} succeeded; results in {out.resolve()}")
    return 0
