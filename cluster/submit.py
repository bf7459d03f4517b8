#!/usr/bin/env python
"""Submit `capeval sweep` to a running Ray cluster with `ray job submit` (a thin, explicit wrapper).

    python cluster/submit.py --address http://HEAD:8265 examples/capquiz_vllm_gpu.toml --out /data/runs/gpu
    python cluster/submit.py ... --dry-run        # print the command only

The submission id is derived from the sweep file and output folder, so submitting the same sweep twice is refused
by Ray while the first is running; after it stops, `--resubmit` appends a counter and the new job resumes from the
output folder (finished cells are skipped by content key). The working directory (this repository, without
.venv, runs/ and .capeval/) is uploaded as the job's runtime_env.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXCLUDES = [".venv", "runs", ".capeval", ".git", "build", "*.so", "__pycache__"]


def build_command(args: argparse.Namespace) -> list[str]:
    ident = hashlib.sha256(f"{Path(args.sweep).name}|{args.out}".encode()).hexdigest()[:10]
    submission_id = f"capeval-{Path(args.sweep).stem}-{ident}" + (f"-{args.resubmit}" if args.resubmit else "")
    runtime_env = {"excludes": EXCLUDES, "env_vars": {"HF_HUB_OFFLINE": "0"}}
    cmd = ["ray", "job", "submit", "--submission-id", submission_id, "--working-dir", str(REPO),
           "--runtime-env-json", json.dumps(runtime_env)]
    if args.address:
        cmd += ["--address", args.address]
    if args.no_wait:
        cmd.append("--no-wait")
    cmd += ["--", "capeval", "sweep", args.sweep, "--out", args.out, "--no-progress"]
    return cmd


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep", help="sweep file, relative to the repository root (it travels with the working dir)")
    p.add_argument("--out", required=True, help="output folder on shared storage visible to the head node")
    p.add_argument("--address", help="job server, e.g. http://HEAD:8265 (default: RAY_ADDRESS)")
    p.add_argument("--no-wait", action="store_true", help="return after submitting instead of streaming logs")
    p.add_argument("--resubmit", type=int, default=0, help="counter appended to the submission id")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    if not (REPO / args.sweep).is_file():
        print(f"submit: sweep file not found in the repository: {args.sweep}", file=sys.stderr)
        return 2
    cmd = build_command(args)
    print(shlex.join(cmd), flush=True)
    if args.dry_run:
        return 0
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
