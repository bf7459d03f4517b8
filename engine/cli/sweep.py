"""`capeval sweep FILE [--out DIR]`: run a sweep file, skipping every cell already done, and print the results."""

from __future__ import annotations

import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run a sweep file (datasets x captioners x prompts x frames x protocols x judges)")
    p.add_argument("file", help="sweep file (.toml or .yaml)")
    p.add_argument("--out", help="output folder (default: runs/<sweep name>); rerunning into it resumes")
    p.add_argument("--check", action="store_true", help="only validate the file and print the grid")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=main)


def print_results(result, stream=sys.stdout) -> None:
    from engine.report import format_table, headline

    table = headline(result.results)
    print(format_table(table), file=stream)
    print(f"full table: {result.out_dir / 'results.parquet'} and {result.out_dir / 'results.csv'} "
          f"({result.results.height} rows)", file=stream)
    print(result.summary(), file=stream)


def main(args) -> int:
    from engine.sweep.config import load_sweep
    from engine.sweep.grid import expand

    config = load_sweep(args.file)
    if args.check:
        cells = expand(config)
        print(f"{args.file}: valid; {len(cells)} cells")
        for cell in cells:
            print("  " + " ".join(f"{k}={v}" for k, v in cell.labels().items()))
        return 0
    from engine.sweep.runner import run_sweep

    out = Path(args.out) if args.out else Path("runs") / config.name
    result = run_sweep(config, out, progress=not args.no_progress)
    print_results(result)
    return 0
