"""`capeval report RUN_DIR`: leaderboards in the terminal and ONE self-contained HTML file (opens offline)."""

from __future__ import annotations

from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("report", help="leaderboards + a self-contained HTML report of a run folder")
    p.add_argument("run_dir", type=Path, help="a sweep's output folder (results.parquet, verdicts/, metrics/)")
    p.add_argument("--out", type=Path, help="HTML file to write (default: RUN_DIR/report.html)")
    p.add_argument("--no-html", action="store_true", help="print the leaderboards only")
    p.add_argument("--resamples", type=int, default=2000, help="paired bootstrap resamples for the comparisons")
    p.add_argument("--max-samples", type=int, default=5000,
                   help="verdict rows embedded in the per-sample browser (failures first)")
    p.add_argument("--quiet", action="store_true", help="print only the report's path")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.report.leaderboard import format_leaderboard, leaderboards
    from engine.report.rundir import load_run

    if args.resamples < 1:
        raise ValueError(f"--resamples must be >= 1, got {args.resamples}")
    data = load_run(args.run_dir)
    if not args.quiet and data.results.height:
        for lb in leaderboards(data.results, n_videos=data.n_videos()):
            print(format_leaderboard(lb))
            print()
    if args.no_html:
        return 0
    from engine.report.html import write_report

    path = write_report(args.run_dir, args.out, n_resamples=args.resamples, max_samples=args.max_samples)
    print(f"report: {path.resolve()}")
    return 0
