"""`capeval sweep FILE [--out DIR]`: run a sweep file, skipping every cell already done, and print the results.

Exit codes (engine/exitcodes.py): 0 every item has a verdict (or the share without one is within
--max-failure-share); 3 completed with failures; 2 invalid sweep file or options; 4 aborted (another run holds
--out, the judge refused authentication, disk full); 75 batches pending (--no-wait: run it again to collect); 130
Ctrl-C and 143 SIGTERM (finished work kept, run.json records the run as interrupted with its cost)."""

from __future__ import annotations

import sys
from pathlib import Path

from capeval.adapters.batch_state import set_no_wait
from capeval.engine.errors import UsageError
from capeval.engine.ray_local import quiet_libraries
from capeval.engine.report import format_table, headline
from capeval.engine.safetext import terminal_text
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.grid import expand
from capeval.engine.sweep.runner import run_sweep
from capeval.engine.sweep.validation import writable_problem


def add_run_options(p) -> None:
    """Options shared by `sweep` and `demo`."""
    p.add_argument("--accept-failures", action="store_true",
                   help="finish cells that still have retryable failures (the results say so in cell_status); "
                        "by default such cells stay incomplete and the next run redoes exactly those items")
    p.add_argument("--max-failure-share", type=_share, default=0.0, metavar="X",
                   help="exit 0 when at most this share (0-1) of items lacks a verdict; above it exit 3 "
                        "(default 0: any item without a verdict gives exit code 3)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--verbose", action="store_true", help="show Ray's and the model loaders' log lines")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def _positive(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def with_limit(config, limit: int | None):
    """`config` with every dataset limited to its first `limit` videos (the smaller limit when the file sets one)."""
    if not limit:
        return config
    from dataclasses import replace

    datasets = tuple(replace(d, limit=min(limit, d.limit) if d.limit else limit) for d in config.datasets)
    return replace(config, datasets=datasets)


def _share(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def register(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run a sweep file (datasets x captioners x prompts x frames x protocols x judges)")
    p.add_argument("file", help="sweep file (.toml or .yaml)")
    p.add_argument("--out", help="output folder (default: runs/<sweep name>); rerunning into it resumes")
    p.add_argument("--check", action="store_true", help="only validate the file and print the grid")
    p.add_argument("--limit", type=_positive, metavar="N",
                   help="use only the items of the first N videos (by video id) of each dataset: a quick trial run "
                        "(its cells are keyed apart from the full run's)")
    p.add_argument("--no-wait", action="store_true",
                   help="batch judges (openai-batch, vllm-batch): submit the round's batches and exit with code 75 "
                        "(pending) instead of waiting for them; the same command run later collects (docs/batch.md)")
    add_run_options(p)
    p.set_defaults(func=main)


def print_results(result, stream=None) -> None:
    # sys.stdout is looked up at call time: a default bound at import would keep whatever stream was current then
    stream = stream if stream is not None else sys.stdout
    table = headline(result.results)
    print(terminal_text(format_table(table)), file=stream)  # labels and ids come from user files: escaped
    # a caption-only sweep's table is captions.parquet/.csv (engine/sweep/caption_only.py)
    stem = "captions" if (result.out_dir / "captions.parquet").exists() and not (
        result.out_dir / "results.parquet").exists() else "results"
    print(f"full table: {result.out_dir / (stem + '.parquet')} and {result.out_dir / (stem + '.csv')} "
          f"({result.results.height} rows)", file=stream)
    print(terminal_text(result.summary()), file=stream)


def exit_line(result, max_failure_share: float) -> str | None:
    """The one line that explains a non-zero exit code (None when the exit code is 0)."""
    a = result.account
    if result.exit_code == 0:
        return None
    return (f"completed with failures: {a.without_verdict} of {a.items} items without a verdict "
            f"({a.failure_share:.1%} > --max-failure-share {max_failure_share:g}); exit code {result.exit_code}")


def run_and_report(config, out: Path, args) -> int:
    quiet_libraries(args.verbose)
    result = run_sweep(config, out, progress=not args.no_progress, accept_failures=args.accept_failures,
                       max_failure_share=args.max_failure_share, verbose=args.verbose)
    print_results(result)
    line = exit_line(result, args.max_failure_share)
    if line:
        print(line, file=sys.stderr)
    return result.exit_code


def main(args) -> int:
    config = with_limit(load_sweep(args.file), args.limit)  # every problem of the file at once (exit 2)
    out = Path(args.out) if args.out else Path("runs") / config.name
    if problem := writable_problem(out):
        raise UsageError(f"output folder {problem}")
    if getattr(args, "no_wait", False):
        set_no_wait(True)
    if args.check:
        cells = expand(config)
        print(f"{args.file}: valid; {len(cells)} cells")
        for cell in cells:
            print("  " + " ".join(f"{k}={v}" for k, v in cell.labels().items()))
        return 0
    return run_and_report(config, out, args)
