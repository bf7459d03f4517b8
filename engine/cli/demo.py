"""`capeval demo`: the README's main job. A small sweep (demo.toml beside this module, shipped in the package) on a machine with no GPU and no network:
real generated videos -> Ray decode -> local captioner (2 prompts x 2 frame counts) -> local judge -> the metrics
of the protocol demo.toml names -> results table. A second run redoes nothing and says how many cells came from the cache.

The captioner reads pixel statistics and the judge is not an LLM, so the numbers only show that the pipeline works
end to end (a plumbing check); they say nothing about any captioning model.
"""

from __future__ import annotations

import sys
from pathlib import Path

from capeval.engine.cli.sweep import add_run_options, exit_line, print_results
from capeval.engine.ray_local import quiet_libraries
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

DEMO_FILE = Path(__file__).resolve().with_name("demo.toml")  # package data (setup.py): an install has it too
NOTICE = (
    "NOTE: these numbers are a PLUMBING CHECK. The local captioner describes pixel statistics (colours, blobs, motion)"
    " and the local judge is not an LLM; they exercise decode -> caption -> judge -> metrics on real videos, and say"
    " nothing about any captioning model."
)


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="run the no-GPU, no-network demo sweep (a plumbing check)")
    p.add_argument("--out", default=".capeval/demo", help="output folder (default .capeval/demo); reruns resume")
    p.add_argument("--sweep", default=str(DEMO_FILE), help="sweep file (default: the demo's own, engine/cli/demo.toml)")
    add_run_options(p)
    p.set_defaults(func=main)


def main(args) -> int:
    import time

    quiet_libraries(args.verbose)
    t0 = time.perf_counter()
    config = load_sweep(args.sweep)
    print(f"capeval demo: sweep {args.sweep} -> {args.out}", file=sys.stderr)
    result = run_sweep(config, Path(args.out), progress=not args.no_progress, accept_failures=args.accept_failures,
                       max_failure_share=args.max_failure_share, verbose=args.verbose)
    print_results(result)
    print(f"cached cells: {result.cells_cached} of {result.cells_total} (a rerun redoes nothing); "
          f"total {time.perf_counter() - t0:.1f}s")
    print(NOTICE)
    _report(result.out_dir)
    line = exit_line(result, args.max_failure_share)
    if line:
        print(line, file=sys.stderr)
    return result.exit_code


def _report(out: Path) -> None:
    """The HTML report of the demo's run folder (capeval.engine.report.write_report), its path printed last."""
    try:
        from capeval.engine.report import write_report

        path = write_report(out)
    except Exception as exc:  # noqa: BLE001 - the results are complete without the report; say why it is missing
        print(f"report not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return
    print(f"report: {path} (open it in a browser; it works offline)")
