"""`capeval report RUN_DIR`: leaderboards in the terminal and ONE self-contained HTML file (opens offline).
`--by COLUMN[,COLUMN]` adds breakdowns by item attributes computed from the run's verdicts (docs/breakdowns.md)."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.cli.breakdowns import add_by_option
from capeval.engine.errors import UsageError
from capeval.engine.frames.decode import probe_duration
from capeval.engine.report.breakdowns import format_breakdowns, run_breakdowns, section_tables
from capeval.engine.report.html import write_report
from capeval.engine.report.leaderboard import format_leaderboard, leaderboards
from capeval.engine.report.rundir import load_run


def register(sub) -> None:
    p = sub.add_parser("report", help="leaderboards + a self-contained HTML report of a run folder")
    p.add_argument("run_dir", type=Path, help="a sweep's output folder (results.parquet, verdicts/, metrics/)")
    p.add_argument("--out", type=Path, help="HTML file to write (default: RUN_DIR/report.html)")
    p.add_argument("--no-html", action="store_true", help="print the leaderboards only")
    p.add_argument("--resamples", type=int, default=2000, help="paired bootstrap resamples for the comparisons")
    p.add_argument("--max-samples", type=int, default=5000,
                   help="verdict rows embedded in the per-sample browser (failures first)")
    add_by_option(p)
    p.add_argument("--quiet", action="store_true", help="print only the report's path")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.resamples < 1:
        raise ValueError(f"--resamples must be >= 1, got {args.resamples}")
    data = load_run(args.run_dir)
    computed = _breakdowns(data, args.by) if args.by else None
    if not args.quiet and data.results.height:
        for lb in leaderboards(data.results, n_videos=data.n_videos()):
            print(format_leaderboard(lb))
            print()
    if not args.quiet:
        text = format_breakdowns(section_tables(data, computed))
        if text:
            print(text + "\n")
    if args.no_html:
        return 0
    path = write_report(args.run_dir, args.out, n_resamples=args.resamples, max_samples=args.max_samples,
                        breakdowns=computed)
    print(f"report: {path.resolve()}")
    return 0


def _breakdowns(data, by):
    """The run's metrics per level of the `--by` attributes, computed from its verdicts (engine/report/breakdowns.py);
    a usage error when no cell's items carry one of them."""
    import sys

    try:
        frame, notes = run_breakdowns(data, by, media_duration=probe_duration)
    except ValueError as exc:  # UnknownColumnError (an attribute no cell's items carry), or no verdicts
        raise UsageError(f"--by: {exc}") from None
    for note in notes:
        print(f"[by] {note}", file=sys.stderr)
    return frame
