"""What people read after a run: the results table (`results`), leaderboards (`leaderboard`), paired comparisons
(`compare`), and the self-contained HTML report (`html`), all read from a run folder (`rundir`).

`from capeval.engine.report import results_table, write_results` is what the sweep runner uses; `write_report(run_dir)`
writes `report.html` into a run folder and returns its path (the demo calls it last)."""

from capeval.engine.report.html import write_report as _write
from capeval.engine.report.results import VALUE_COLUMNS, format_table, headline, results_table, write_results


def write_report(run_dir, out=None, **options):
    """Write the HTML report of `run_dir` (default `<run_dir>/report.html`); returns its path."""
    return _write(run_dir, out, **options)


__all__ = ["VALUE_COLUMNS", "format_table", "headline", "results_table", "write_report", "write_results"]
