"""`capeval bench NAME [args]`: runs benchmarks/bench_NAME.py's `main(argv)` (kernels, judge, decode, caption).

`capeval bench caption --json [--quick]`: a caption-only sweep of 500 generated videos against an OpenAI-compatible
captioner with lognormal latency, captions/s against the concurrency bound, the old batch loop as the baseline
(benchmarks/bench_caption.py).

`capeval bench judge --judge openai|vllm --judge-model M --protocol P --items FILE ...` measures the user's own judge
(benchmarks/judge_endpoint.py, docs/bench.md); without --judge it is the macro benchmark of the judge path."""

from __future__ import annotations

import argparse
import importlib

BENCHMARKS = ("kernels", "judge", "decode", "caption")


def register(sub) -> None:
    p = sub.add_parser("bench", help="performance benchmarks (JSON with same-process baselines); "
                                     "`bench judge --judge ...` measures your own judge")
    p.add_argument("name", choices=BENCHMARKS)
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the benchmark (e.g. --json --quick)")
    p.set_defaults(func=run)


def run(args) -> int:
    module = importlib.import_module(f"benchmarks.bench_{args.name}")
    return int(module.main(args.rest) or 0)
