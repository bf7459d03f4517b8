"""`capeval bench NAME [args]`: runs benchmarks/bench_NAME.py's `main(argv)` (kernels, judge, decode)."""

from __future__ import annotations

import argparse
import importlib

BENCHMARKS = ("kernels", "judge", "decode")


def register(sub) -> None:
    p = sub.add_parser("bench", help="performance benchmarks; print JSON with same-process baselines")
    p.add_argument("name", choices=BENCHMARKS)
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the benchmark (e.g. --json --quick)")
    p.set_defaults(func=run)


def run(args) -> int:
    module = importlib.import_module(f"benchmarks.bench_{args.name}")
    return int(module.main(args.rest) or 0)
