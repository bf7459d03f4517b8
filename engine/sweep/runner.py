"""`run_sweep`: expand the grid, skip finished cells, caption what is missing, judge, compute metrics, report.

Output folder layout (every store is append-only Parquet segments, so a kill -9 loses at most the batch in flight):

    videos/      generated videos (synthetic datasets)       frames/     decoded frame cache (.npy)
    captions/    CAPTIONS rows, keyed by caption_key          judge_cache/ judgment cache (SQLite WAL)
    verdicts/    VERDICTS rows + cell_key                     metrics/    long metrics + cell columns + cell_key
    results.parquet, results.csv                              the results table of this sweep's cells

A cell is finished when its metrics segment exists (one atomic append per cell), so a rerun skips it entirely; a
cell killed half-way reuses its stored captions and cached judgments and redoes only the rest.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from engine.keys import content_key
from engine.prompts_library import get_prompt
from engine.sweep.config import ComponentSpec, SweepConfig
from engine.sweep.datasets import LoadedDataset, load_dataset
from engine.sweep.grid import CELL_COLUMNS, Cell, expand


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

    def summary(self) -> str:
        c = self.caption_stats
        return (f"cells: {self.cells_total} total, {self.cells_cached} cached (skipped), {self.cells_run} run | "
                f"captions: {c.get('captioned', 0)} new, {c.get('cached', 0)} cached, {c.get('failed', 0)} failed | "
                f"judge requests: {self.judge_stats.get('sent', 0)} sent, {self.judge_stats.get('cached', 0)} "
                f"cached | {self.wall_s:.1f}s")


def component_revision(kind: str, spec: ComponentSpec) -> str:
    """Identity of a captioner's/judge's weights without loading them: the class's `revision` when it is plain
    text, or its `static_revision(params)` classmethod (e.g. a hash of the model folder); params are keyed too."""
    from engine.registry import lookup

    if kind == "captioner" and spec.name == "vllm":
        import adapters.vllm_captioner  # noqa: F401
    cls = lookup(kind, spec.name)
    if hasattr(cls, "static_revision"):
        return str(cls.static_revision(spec.params))
    rev = getattr(cls, "revision", "")
    return rev if isinstance(rev, str) else ""


def init_ray() -> None:
    """Join the cluster named by RAY_ADDRESS, or start a small local Ray (loopback, no dashboard)."""
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    else:
        ray.init(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False, log_to_driver=False,
                 object_store_memory=256 * 1024 * 1024, _node_ip_address="127.0.0.1")


class _Stores:
    def __init__(self, out: Path):
        from engine.schemas import CAPTIONS
        from engine.store import SegmentStore

        self.captions = SegmentStore(out / "captions", CAPTIONS)
        self.verdicts = SegmentStore(out / "verdicts")
        self.metrics = SegmentStore(out / "metrics")
        self.judge_cache = out / "judge_cache"
        self.frames = out / "frames"


def run_sweep(config: SweepConfig, out_dir: str | Path, *, progress: bool = True, log=None,
              exit_once_marker: str | None = None) -> SweepResult:
    """Run every unfinished cell of `config`, writing under `out_dir`; returns the results of all its cells."""
    t0 = time.perf_counter()
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stores = _Stores(out)
    datasets = {d.name: load_dataset(d, out_dir=out, sweep_dir=config.path.parent) for d in config.datasets}
    cap_rev = {c.display: component_revision("captioner", c) for c in config.captioners}
    judge_rev = {j.display: component_revision("judge", j) for j in config.judges}
    cells = expand(config)
    keys = {
        cell: cell.key(dataset_digest=datasets[cell.caption.dataset.name].digest,
                       captioner_revision=cap_rev[cell.caption.captioner.display],
                       prompt_text=get_prompt(cell.caption.prompt_id).text,
                       judge_revision=judge_rev[cell.judge.display])
        for cell in cells
    }
    done = stores.metrics.existing_keys("cell_key") if stores.metrics.segments() else set()
    pending = [c for c in cells if keys[c] not in done]
    log(f"[sweep {config.name}] {len(cells)} cells: {len(cells) - len(pending)} cached (skipped), "
        f"{len(pending)} to run")
    caption_stats: dict = {}
    judge_stats: dict = {"sent": 0, "cached": 0}
    if pending:
        from engine.stages.pipeline import caption_cells_for

        init_ray()
        caption_stats = caption_cells_for(pending, datasets, config, stores, cap_rev, progress=progress,
                                          exit_once_marker=exit_once_marker)
        judges: dict = {}
        try:
            for i, cell in enumerate(pending, start=1):
                summary = _run_cell(cell, keys[cell], datasets[cell.caption.dataset.name], config, stores,
                                    cap_rev, judges, progress)
                judge_stats["sent"] += summary.get("sent", 0)
                judge_stats["cached"] += summary.get("cached", 0)
                log(f"[sweep {config.name}] cell {i}/{len(pending)} done: "
                    + " ".join(f"{k}={v}" for k, v in cell.labels().items()))
        finally:
            for j in judges.values():
                j.close()
    from engine.report import results_table, write_results

    results = results_table(stores.metrics, [keys[c] for c in cells])
    write_results(results, out)
    return SweepResult(results, len(cells), len(cells) - len(pending), len(pending), caption_stats, judge_stats,
                       time.perf_counter() - t0, out)


def _run_cell(cell: Cell, key: str, data: LoadedDataset, config: SweepConfig, stores: _Stores, cap_rev: dict,
              judges: dict, progress: bool) -> dict:
    import polars as pl

    from engine.judging.runner import run_judging
    from engine.registry import lookup
    from engine.stages.caption import read_captions
    from engine.stages.pipeline import cell_caption_keys

    protocol = lookup("protocol", cell.protocol.name)
    jspec = cell.judge
    if jspec.display not in judges:
        if config.options.judge_actors:  # engines on Ray actors (one per GPU), fed with backpressure
            from adapters.ray_pool import JudgePool

            judges[jspec.display] = JudgePool(jspec.name, jspec.params, num_actors=config.options.judge_actors,
                                              batch_size=config.options.judge_batch_size,
                                              max_restarts=config.options.max_restarts)
        else:
            judges[jspec.display] = lookup("judge", jspec.name)(**jspec.params)
    judge = judges[jspec.display]
    captions = read_captions(stores.captions, cell_caption_keys(cell, data, stores, cap_rev))
    items = data.items.filter(pa.compute.equal(data.items.column("benchmark"), cell.protocol.name)) \
        if cell.protocol.name in set(data.items.column("benchmark").to_pylist()) else data.items
    requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                       seeds=list(jspec.seeds), **cell.protocol.params)
    verdicts, summary = run_judging(requests, judge, cache_dir=stores.judge_cache, protocol=protocol,
                                    batch_size=config.options.judge_batch_size, progress=progress,
                                    return_summary=True)
    stores.verdicts.append(verdicts.append_column("cell_key", pa.array([key] * verdicts.num_rows, pa.string())))
    metrics = protocol.compute_metrics(pl.from_arrow(verdicts), items=pl.from_arrow(items),
                                       captions=pl.from_arrow(captions), n_resamples=config.options.n_resamples,
                                       seed=0)
    labels = cell.labels()
    metrics = metrics.drop([c for c in CELL_COLUMNS if c in metrics.columns])
    metrics = metrics.with_columns([pl.lit(v).alias(k) for k, v in labels.items()] + [pl.lit(key).alias("cell_key")])
    # One atomic append per cell: its presence is what marks the cell finished.
    stores.metrics.append(metrics.to_arrow())
    return {"sent": summary.sent, "cached": summary.cached}


def sweep_fingerprint(config: SweepConfig) -> str:
    return content_key("sweep", json.loads(json.dumps(config, default=lambda o: getattr(o, "__dict__", str(o)))))
