"""Caption-only sweeps (no `[[protocols]]`): caption every caption cell, reusing stored captions, and write one row
per video and caption cell to captions.parquet / captions.csv, with an `item_status` like the judged sweeps' rows."""

from __future__ import annotations

import time

import polars as pl

from capeval.engine.ray_local import init_ray
from capeval.engine.sweep import accounting
from capeval.engine.sweep import cells as cellmod
from capeval.engine.sweep.captioning import CaptionOutcome, caption_cells_for
from capeval.engine.sweep.config import ComponentSpec
from capeval.engine.sweep.datasets import dataset_records
from capeval.engine.sweep.grid import ResultCell, caption_cells
from capeval.engine.sweep.results import SweepResult, record_run, write_results_files
from capeval.engine.sweep.run import SweepRun


def run_caption_only(run: SweepRun) -> SweepResult:
    """A sweep without protocols: caption every caption cell (reusing stored captions) and write the captions,
    one row per video and caption cell, to captions.parquet/.csv, and the run record to run.json; exit FAILURES when a video has no caption."""
    config, out = run.config, run.out
    ccells = [c for c in caption_cells(config) if not c.from_file]
    run.log(f"[sweep {config.name}] caption-only: {len(ccells)} caption cells")
    init_ray(verbose=run.verbose)
    interrupted = None
    try:
        outcome = caption_cells_for(ccells, run)
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the record says what was captioned, then the run ends
        interrupted, outcome = stop, CaptionOutcome()
    inputs = cellmod.load_inputs(run.stores, outcome)
    account = accounting.RunAccount()
    tables = []
    for cc in ccells:
        view = ResultCell(cc, ComponentSpec("none"), ComponentSpec("none"))
        captions, failures = cellmod.cell_captions(view, run, inputs)
        df = pl.from_arrow(captions).with_columns(
            pl.lit(cc.dataset.name).alias("dataset"), pl.lit(cc.captioner.display).alias("captioner"),
            pl.Series("item_status", [failures[v].status if v in failures else accounting.OK
                                      for v in captions.column("video_id").to_pylist()], pl.String))
        tables.append(df)
        account.add_captions(df)
    results = pl.concat(tables, how="diagonal_relaxed") if tables else pl.DataFrame()
    if results.height:
        results = results.select(["dataset", "captioner", "prompt_id", "frame_spec", "video_id", "text", "item_status",
                                  "error", "n_tokens", "latency_s", "timestamps_mode"])
    if interrupted is None:
        write_results_files(results, out)
        parquet, csv = out / "results.parquet", out / "results.csv"
        for src, dst in ((parquet, out / "captions.parquet"), (csv, out / "captions.csv")):
            src.replace(dst)
    result = SweepResult(results, len(ccells), 0, len(ccells), outcome.stats, {}, time.perf_counter() - run.started,
                         out, account, account.exit_code(run.max_failure_share), 0,
                         datasets=dataset_records(run.datasets, config.path.parent))
    record_run(result, run, [], interrupted=interrupted)  # run.json, as a judged sweep writes it
    if interrupted is not None:
        raise interrupted
    return result
