"""`capeval` command line. Each subcommand lives in its own module here, exposing `register(subparsers)`;
heavy imports (Ray, vLLM, torch) happen inside the command functions so `capeval --help` stays fast."""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules, in help order. A module registers one or more subcommands.
_COMMAND_MODULES = ("demo", "capability", "capquiz", "score", "judge", "align", "sweep", "compare", "report", "submit",
                    "list", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="capeval", description="High-throughput evaluation engine for video captions.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(f"engine.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"engine.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted; finished work is kept and a rerun resumes", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError, KeyError) as exc:
        if getattr(args, "debug", False):
            raise
        print(f"capeval {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
