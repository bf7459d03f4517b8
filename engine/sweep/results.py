"""What a sweep gives back and leaves in its folder: `SweepResult`, results.parquet/.csv and the run record
(run.json). Shared by the judged sweep (runner.py) and the caption-only one (caption_only.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from capeval.engine.errors import AbortedError, Terminated, UsageError
from capeval.engine.report import write_results
from capeval.engine.report.results import cells_without_value
from capeval.engine.report.tracking import log_run
from capeval.engine.runrecord import append_run_record, sweep_record
from capeval.engine.store.segments import storage_error
from capeval.engine.sweep import accounting
from capeval.engine.sweep.config import SweepConfig
from capeval.engine.sweep.run import SweepRun


@dataclass
class SweepResult:
    results: "object"  # polars DataFrame: the results table (long format)
    cells_total: int
    cells_cached: int
    cells_run: int
    caption_stats: dict = field(default_factory=dict)
    judge_stats: dict = field(default_factory=dict)
    wall_s: float = 0.0
    out_dir: Path | None = None
    account: accounting.RunAccount = field(default_factory=accounting.RunAccount)
    exit_code: int = 0
    recovered_cells: int = 0
    cost: dict = field(default_factory=dict)  # run.json's `cost` (engine/sweep/usage.py); {} when not computed
    datasets: dict = field(default_factory=dict)  # run.json's `datasets`: per name, LoadedDataset.record()

    def summary(self) -> str:
        c = self.caption_stats
        return (f"cells: {self.cells_total} total, {self.cells_cached} cached (skipped), {self.cells_run} run | "
                f"captions: {c.get('captioned', 0)} new, {c.get('cached', 0)} cached, {c.get('failed', 0)} failed | "
                f"judge requests: {self.judge_stats.get('sent', 0)} sent, {self.judge_stats.get('cached', 0)} "
                f"cached | {self.wall_s:.1f}s\n{self.account.summary()}" + cost_line(self.cost))

    def to_pandas(self) -> SweepResult:
        """The same result with `results` as a pandas DataFrame (needs the optional extra `capeval[pandas]`)."""
        try:
            import pandas  # noqa: F401  # deferred: optional extra
        except ImportError:
            raise ModuleNotFoundError("to_pandas() needs pandas, an optional extra of capeval: "
                                      "pip install 'capeval[pandas]'", name="pandas") from None
        return replace(self, results=self.results.to_pandas())


def record_run(result: SweepResult, run: SweepRun, cell_keys: list[str],
               interrupted: KeyboardInterrupt | None = None) -> None:
    """Append this run's record to run.json (capeval.engine.runrecord), items by status included; status "finished", or
    "interrupted" for a run that Ctrl-C or SIGTERM (`interrupted`) ended, `interrupted_by` naming the signal. A
    record that cannot be made is reported, not fatal: the results are complete without it; a disk that refuses it
    stops the run (exit 4) like every other write."""
    try:
        record = sweep_record(result, run.config, cap_rev=run.captioner_revisions, judge_rev=run.judge_revisions,
                              cell_keys=cell_keys)
        record["counts_by_status"]["items"] = dict(result.account.by_status)
        record["counts_by_status"]["items_without_verdict"] = result.account.without_verdict
        record["no_value"] = cells_without_value(result.results)
        if result.cost:
            record["cost"] = result.cost
        if result.datasets:
            record["datasets"] = result.datasets
        record["status"] = "finished" if interrupted is None else "interrupted"
        if interrupted is not None:
            record["interrupted_by"] = "SIGTERM" if isinstance(interrupted, Terminated) else "SIGINT"
        append_run_record(result.out_dir, **record)
    except AbortedError:  # the disk is full (or read-only): the run stops saying so, naming run.json
        raise
    except Exception as exc:  # noqa: BLE001
        run.log(f"[sweep {run.config.name}] warning: run.json not written: {type(exc).__name__}: {exc}")


def cost_line(cost: dict) -> str:
    """One line for the terminal: what the sweep's results cost (engine/sweep/usage.py), '' when not computed."""
    if not cost or "error" in cost:
        return f"\ncost: {cost['error']}" if cost else ""
    if cost.get("total_usd") is None:
        return "\ncost: unknown (no prices for " + ", ".join(
            [f"judge {k}" for k, v in cost.get("judges", {}).items() if v["cost_usd"] is None]
            + [f"captioner {k}" for k, v in cost.get("captioners", {}).items() if v["cost_usd"] is None]) + ")"
    return (f"\ncost: ${cost['total_usd']:.4f} (paid in this run ${cost['paid_in_run_usd']:.4f}, reused from caches "
            f"${cost['reused_usd']:.4f})")


def write_results_files(results, out: Path) -> None:
    """results.parquet/.csv; a full or read-only disk ends the run with one line (the stores are complete)."""
    try:
        write_results(results, out)
    except OSError as exc:
        for stray in out.glob(".results*.tmp"):
            stray.unlink(missing_ok=True)
        raise storage_error(exc, out / "results.csv", "the results table") from exc


def log_to_tracker(config: SweepConfig, out: Path, log: Callable[[str], None]) -> None:
    """`[options] tracking`: log the finished run folder to the tracker (engine/report/tracking.py), saying where.
    A tracker that refuses the run (unreachable, no access) is reported, not fatal: the run folder is complete and
    `capeval export` logs it later."""
    spec = config.options.tracking
    try:
        logged = log_run(out, spec)
    except (UsageError, AbortedError) as exc:  # no metrics; the tracker refused the run or could not be reached
        log(f"[sweep {config.name}] warning: not logged to {spec.to}: {exc}; `capeval export {out} --to {spec.to}` "
            f"logs it later")
        return
    log(f"[sweep {config.name}] {logged.line()}")
