"""`capeval bench NAME [args]`: runs a registered benchmark; `capeval bench` (or `--list`) lists them.

A benchmark is a callable `main(argv: list[str]) -> int` (the exit code) registered under its name in the registry's
"benchmark" kind. Benchmarks register through the entry point group `capeval.benchmarks`, each entry point naming
its `main` (`kernels = "capeval.benchmarks.bench_kernels:main"` in pyproject.toml); engine/registry.py registers the loaded
callable under the entry point's name. So the engine names no benchmark module (engine/ never imports benchmarks/),
and a benchmark from another distribution registers the same way. The list shows the first line of the docstring of
the module that defines each `main`.

`capeval bench caption --json [--quick]`: a caption-only sweep of generated videos against an OpenAI-compatible
captioner with lognormal latency, captions/s against the concurrency bound, the old batch loop as the baseline.
`capeval bench judge --judge openai|vllm --judge-model M --protocol P --items FILE ...` measures the user's own judge
(docs/bench.md); without --judge it is the macro benchmark of the judge path."""

from __future__ import annotations

import argparse
import sys

from capeval.engine.errors import UsageError
from capeval.engine.registry import lookup, names


def register(sub) -> None:
    p = sub.add_parser("bench", help="performance benchmarks (JSON with same-process baselines); "
                                     "`bench judge --judge ...` measures your own judge; `bench --list` lists them")
    p.add_argument("--list", action="store_true", help="list the registered benchmarks and exit")
    # Names are not argparse choices: those would scan the entry points whenever any capeval command builds its parser.
    p.add_argument("name", nargs="?", help="the benchmark to run (`capeval bench --list` lists them)")
    p.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the benchmark (e.g. --json --quick)")
    p.set_defaults(func=run)


def summary(main) -> str:
    """The first line of the docstring of the module defining `main` (its own docstring when the module has none)."""
    module = sys.modules.get(getattr(main, "__module__", "") or "")
    doc = (getattr(module, "__doc__", None) or getattr(main, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def listing() -> str:
    found = names("benchmark")
    if not found:
        return "no benchmarks registered (entry point group capeval.benchmarks)"
    width = max(map(len, found))
    return "\n".join(f"{name:<{width}}  {summary(lookup('benchmark', name))}" for name in found)


def run(args) -> int:
    if args.list or not args.name:
        print(listing())
        return 0
    if args.name not in names("benchmark"):
        raise UsageError(f"unknown benchmark {args.name!r}; the registered ones:\n{listing()}")
    return int(lookup("benchmark", args.name)(args.rest) or 0)
