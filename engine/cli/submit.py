"""`capeval submit FILE`: run a sweep as a Ray Job on a running cluster, stream its logs, fetch its results.

    capeval submit examples/capquiz_vllm_gpu.toml --address http://HEAD:8265 --out runs/gpu
    capeval submit sweep.toml --remote-out /shared/runs/gpu      # results also kept on shared storage (resumable)

The sweep file may sit anywhere. It is validated here first, then staged into a temporary working_dir: every
path it names that exists (datasets, caption files, prompt files and packs) is copied in beside it and the copy of
the sweep file points at the copies, so the job finds them on any node. The job runs `capeval submit --job-side`,
which runs the sweep against the cluster (Ray sets RAY_ADDRESS for a job's driver) and, at the end, prints its
result files (results table, run record, metrics, verdicts, captions) into the job log as a base64 tarball between
marker lines. The client streams the log without those lines and unpacks the tarball into `--out`: no shared
filesystem is needed to get results back. With `--remote-out` on shared storage, resubmitting resumes a killed
sweep (finished cells are found by content key). `ray job submit` needs `ray[default]` on the client and cluster.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

BEGIN, END = "@@capeval-results-begin@@", "@@capeval-results-end@@"
#: what the job sends back (frames, videos and the judge cache stay on the cluster)
RESULT_ENTRIES = ("results.parquet", "results.csv", "run.json", "metrics", "verdicts", "captions")
#: keys whose string values are paths even without a slash in them
PATH_KEYS = {"path", "file", "pack", "prompts", "annotations", "videos", "media_dir", "root", "judgments",
             "captions", "dir", "folder", "items"}
MAX_SHIPPED_BYTES = 400 * 1024 * 1024  # Ray refuses working_dirs above ~500 MiB; fail clearly before


def register(sub) -> None:
    p = sub.add_parser("submit", help="run a sweep as a Ray Job on a cluster; stream logs; fetch the results")
    p.add_argument("file", type=Path, help="sweep file (.toml/.yaml), anywhere on this machine")
    p.add_argument("--address", help="the cluster's job server, e.g. http://HEAD:8265 (default: RAY_ADDRESS, "
                                     "else http://127.0.0.1:8265)")
    p.add_argument("--out", type=Path, help="local folder for the fetched results (default: runs/<sweep name>)")
    p.add_argument("--remote-out", help="output folder on the cluster (shared storage makes resubmits resume); "
                                        "default: /tmp/capeval-jobs/<submission id> on the head node")
    p.add_argument("--no-ship-data", action="store_true",
                   help="do not copy the paths the sweep names: they exist on the cluster at the same paths")
    p.add_argument("--python", default="python", help="python executable on the cluster (default: python)")
    p.add_argument("--submission-id", help="job id (default: derived from the sweep file and --remote-out)")
    p.add_argument("--resubmit", type=int, default=0, help="counter appended to the derived submission id")
    p.add_argument("--no-wait", action="store_true", help="return after submitting (fetch nothing)")
    p.add_argument("--dry-run", action="store_true", help="stage and print the job, submit nothing")
    p.add_argument("--job-side", action="store_true", help=argparse.SUPPRESS)  # what the job itself runs
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


# ---- staging ------------------------------------------------------------------------------------------------


def _read_raw(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        import tomllib

        return tomllib.loads(text)
    import yaml

    return yaml.safe_load(text)


def _looks_like_path(key: str | None, value: str, base: Path) -> Path | None:
    if not value or "\n" in value or len(value) > 4096:
        return None
    if key not in PATH_KEYS and "/" not in value and not Path(value).suffix:
        return None
    candidate = Path(value).expanduser()
    candidate = candidate if candidate.is_absolute() else base / candidate
    try:
        return candidate.resolve() if candidate.exists() else None
    except OSError:
        return None


def stage_sweep(sweep: Path, staging: Path, ship_data: bool = True) -> tuple[Path, list[tuple[str, str]]]:
    """Copy `sweep` (as YAML) and every existing path it names into `staging`; returns (staged sweep file,
    [(original path, staged relative path)])."""
    import yaml

    sweep = sweep.resolve()
    raw = _read_raw(sweep)
    base = sweep.parent
    shipped: dict[Path, str] = {}
    total = 0

    def ship(src: Path) -> str:
        nonlocal total
        if src not in shipped:
            rel = f"data/{len(shipped):02d}_{src.name}"
            dest = staging / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dest, symlinks=False)
                total += sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
            elif src.suffix.lower() in TABLE_SUFFIXES:  # an items table: its own folder, its media beside it
                rel = f"data/{len(shipped):02d}_{src.stem}/{src.name}"
                dest = staging / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                total += ship_table(src, dest)
            else:
                shutil.copy2(src, dest)
                total += dest.stat().st_size
            if total > MAX_SHIPPED_BYTES:
                raise ValueError(f"{sweep}: the paths it names hold more than {MAX_SHIPPED_BYTES >> 20} MiB; put "
                                 f"them on storage the cluster sees and pass --no-ship-data")
            shipped[src] = rel
        return shipped[src]

    def walk(node, key=None):
        if isinstance(node, dict):
            return {k: walk(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, key) for v in node]
        if isinstance(node, str):
            found = _looks_like_path(key, node, base)
            if found is not None:
                return ship(found) if ship_data else str(found)
        return node

    staged = walk(raw)
    staging.mkdir(parents=True, exist_ok=True)
    out = staging / (sweep.stem + ".yaml")
    out.write_text(f"# staged by capeval submit from {sweep}\n" + yaml.safe_dump(staged, sort_keys=False))
    return out, [(str(k), v) for k, v in shipped.items()]


TABLE_SUFFIXES = (".jsonl", ".csv", ".tsv", ".parquet")


def ship_table(src: Path, dest: Path) -> int:
    """Copy a table to `dest`; when it has a `media_path` column, copy the media files it names (relative to its
    folder, or absolute) to `dest`'s folder under media/ and point the copy's rows at them. Returns bytes copied."""
    import polars as pl

    if src.suffix == ".jsonl":
        rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    elif src.suffix == ".parquet":
        rows = pl.read_parquet(src).to_dicts()
    else:
        rows = pl.read_csv(src, separator="\t" if src.suffix == ".tsv" else ",", infer_schema=False).to_dicts()
    if not rows or not any(isinstance(r, dict) and r.get("media_path") for r in rows):
        shutil.copy2(src, dest)
        return dest.stat().st_size
    copied: dict[Path, str] = {}
    total = 0
    for r in rows:
        media = r.get("media_path")
        if not media:
            continue
        path = Path(media) if Path(media).is_absolute() else src.parent / media
        if not path.is_file():
            continue  # left as written: the loader reports it, or the cluster has it
        path = path.resolve()
        if path not in copied:
            copied[path] = f"media/{len(copied):05d}_{path.name}"
            target = dest.parent / copied[path]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            total += target.stat().st_size
        r["media_path"] = copied[path]
    if src.suffix == ".jsonl":
        dest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    elif src.suffix == ".parquet":
        pl.DataFrame(rows, infer_schema_length=None).write_parquet(dest)
    else:
        pl.DataFrame(rows).write_csv(dest, separator="\t" if src.suffix == ".tsv" else ",")
    return total + dest.stat().st_size


def submission_id(sweep: Path, remote_out: str | None, resubmit: int) -> str:
    digest = hashlib.sha256(sweep.read_bytes() + f"|{remote_out}".encode()).hexdigest()[:10]
    return f"capeval-{sweep.stem}-{digest}" + (f"-{resubmit}" if resubmit else "")


# ---- the job side: run the sweep, print the results into the log -------------------------------------------


def pack_results(out_dir: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in RESULT_ENTRIES:
            if (out_dir / name).exists():
                tar.add(out_dir / name, arcname=name)
    return buf.getvalue()


def job_side(args) -> int:
    from engine.sweep.config import load_sweep
    from engine.sweep.runner import run_sweep

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
    from engine.runrecord import RUN_RECORD

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


def run(args) -> int:
    if args.job_side:
        return job_side(args)
    from engine.sweep.config import load_sweep

    config = load_sweep(args.file)  # fail here, with file/line/field, not on the cluster
    staging = Path(tempfile.mkdtemp(prefix="capeval-submit-"))
    try:
        staged, shipped = stage_sweep(args.file, staging, ship_data=not args.no_ship_data)
        job_id = args.submission_id or submission_id(args.file, args.remote_out, args.resubmit)
        entry = [args.python, "-m", "engine.cli", "submit", "--job-side", staged.name,
                 "--remote-out", args.remote_out or f"/tmp/capeval-jobs/{job_id}"]
        import shlex

        entrypoint = shlex.join(entry)
        runtime_env = {"working_dir": str(staging)}
        print(f"[submit] {args.file} -> job {job_id}: {entrypoint}", file=sys.stderr)
        for src, rel in shipped:
            print(f"[submit]   ships {src} as {rel}", file=sys.stderr)
        if args.dry_run:
            print(json.dumps({"submission_id": job_id, "entrypoint": entrypoint, "runtime_env": runtime_env,
                              "shipped": shipped}, indent=1))
            return 0
        from ray.job_submission import JobStatus, JobSubmissionClient

        address = args.address or os.environ.get("RAY_ADDRESS") or "http://127.0.0.1:8265"
        if not address.startswith("http"):
            address = "http://" + address.split("://")[-1].rsplit(":", 1)[0] + ":8265"
        client = JobSubmissionClient(address)
        client.submit_job(entrypoint=entrypoint, submission_id=job_id, runtime_env=runtime_env)
        print(f"[submit] submitted {job_id} to {address}", file=sys.stderr)
        if args.no_wait:
            print(job_id)
            return 0
        _stream(client, job_id, lambda line: print(line, file=sys.stderr, flush=True))
        status = client.get_job_status(job_id)
        while status not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            time.sleep(1)
            status = client.get_job_status(job_id)
        if status != JobStatus.SUCCEEDED:
            info = client.get_job_info(job_id)
            print(f"[submit] job {job_id} {status.value}: {info.message}", file=sys.stderr)
            return 1
        payload = extract_payload(client.get_job_logs(job_id))
        if payload is None:
            print(f"[submit] job {job_id} succeeded but its log holds no results", file=sys.stderr)
            return 1
        out = args.out or Path("runs") / config.name
        unpack_results(payload, out)
        print(f"[submit] job {job_id} succeeded; results in {out.resolve()}")
        return 0
    finally:
        shutil.rmtree(staging, ignore_errors=True)
