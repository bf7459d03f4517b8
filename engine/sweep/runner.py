"""`run_sweep`: expand the grid, skip finished cells, caption what is missing, judge, compute metrics, report.

Output folder layout (one writer at a time: `.capeval.lock`, capeval.engine.store.lock):

    videos/      generated videos (synthetic datasets)       frames/       decoded frame cache (.npy)
    frames_index/ FRAMES rows of decoded (video, spec)        captions/     successful CAPTIONS rows, one per key
                 (both group-committed and compacted: a few files per run folder, engine/store/segments.py)
    judge_cache/ judgment cache (SQLite WAL)                  verdicts/     <cell_key>.parquet: VERDICTS + cell_key,
    metrics/     <cell_key>.parquet: metrics + cell columns                 item_status, retryable
                 + cell_key + cell_status                     results.parquet, results.csv: this sweep's cells

Guarantees (docs/guarantees.md): every item of every cell yields verdict rows, with a verdict or with an
`item_status` saying why not (capeval.engine.sweep.accounting); work is shared through content keys (one decode, one
caption, one judge call per key), rows never are. A cell is finished when its metrics segment is committed as
`complete` (or `failures_accepted`); a cell with retryable failures is committed as `incomplete` and the next run
redoes it, sending only what the caches do not hold. A kill -9 anywhere loses at most the work in flight.
"""

from __future__ import annotations

import errno
import sys
import time
from pathlib import Path

from capeval.engine.keys import file_digest
from capeval.engine.memory import release_unused_memory
from capeval.engine.ray_local import init_ray
from capeval.engine.registry import lookup
from capeval.engine.report import results_table
from capeval.engine.store.lock import FolderLock
from capeval.engine.store.segments import storage_error
from capeval.engine.sweep import accounting, cells as cellmod
from capeval.engine.sweep.caption_only import run_caption_only
from capeval.engine.sweep.captioning import CaptionOutcome, caption_cells_for
from capeval.engine.sweep.config import ComponentSpec, SweepConfig
from capeval.engine.sweep.datasets import (LoadedDataset, dataset_records, judge_sees_frames, load_dataset,
                                          media_required)
from capeval.engine.sweep.decide_rounds import run_adaptive
from capeval.engine.sweep.grid import ResultCell, expand
from capeval.engine.sweep.judge_stage import JudgeStage, judge_after_captions, judge_while_captioning
from capeval.engine.sweep.overlap import CaptionThread
from capeval.engine.sweep.results import SweepResult, log_to_tracker, record_run, write_results_files
from capeval.engine.sweep.run import RunStores, SweepRun
from capeval.engine.sweep.usage import CostLedger
from capeval.engine.gc_thresholds import bulk_gc

__all__ = ["SweepResult", "run_sweep", "init_ray", "component_revision"]


def component_revision(kind: str, spec: ComponentSpec) -> str:
    """Identity of a captioner's/judge's weights without loading them: the class's `revision` when it is plain
    text, or its `static_revision(params)` classmethod (e.g. a hash of the model folder); params are keyed too."""
    cls = lookup(kind, spec.name)
    if hasattr(cls, "static_revision"):
        return str(cls.static_revision(spec.params))
    rev = getattr(cls, "revision", "")
    return rev if isinstance(rev, str) else ""


@bulk_gc()
def run_sweep(config: SweepConfig, out_dir: str | Path, *, progress: bool = True, log=None,
              accept_failures: bool = False, max_failure_share: float = 0.0, verbose: bool = False) -> SweepResult:
    """Run every unfinished cell of `config`, writing under `out_dir` (holding its lock); returns the results of
    all its cells, the item accounting and the exit code (OK, or FAILURES when the share of items without a
    verdict exceeds `max_failure_share`). Raises AbortedError (lock held, auth refused, disk full)."""
    out = Path(out_dir)
    with FolderLock(out, purpose=f"sweep {config.name}"):
        stores = RunStores(out)
        try:
            result = _run_locked(config, out, stores, progress=progress, log=log, accept_failures=accept_failures,
                                 max_failure_share=max_failure_share, verbose=verbose)
        except BaseException:
            try:  # keep what was made before the error (the run's own error is the one to report)
                stores.close()
            except Exception:  # noqa: BLE001
                pass
            raise
        stores.close()  # the run folder at rest: what a tracker is sent is what a later export would send
        if config.options.tracking is not None:
            log_to_tracker(config, out, log or _stderr)
        return result


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _run_locked(config: SweepConfig, out: Path, stores: RunStores, *, progress: bool, log, accept_failures: bool,
                max_failure_share: float, verbose: bool) -> SweepResult:
    started = time.perf_counter()
    log = log or _stderr
    recovered = cellmod.recover(stores)
    if recovered:
        log(f"[sweep {config.name}] rolled back {len(recovered)} cell(s) interrupted between verdicts and metrics")
    run = SweepRun(config, out, stores, datasets={d.name: _load(d, config, out) for d in config.datasets},
                   captioner_revisions={c.display: component_revision("captioner", c) for c in config.captioners},
                   judge_revisions={j.display: component_revision("judge", j) for j in config.judges},
                   progress=progress, log=log, accept_failures=accept_failures, max_failure_share=max_failure_share,
                   verbose=verbose, started=started)
    release_unused_memory()  # the checks' and the datasets' reading is done: what it freed goes back
    ledger = CostLedger(run)  # what the caches hold before this run (engine/sweep/usage.py)
    if not config.protocols:  # caption-only sweep
        return run_caption_only(run)
    cells = expand(config, run.datasets, note=lambda text: log(f"[sweep {config.name}] note: {text}"))
    keys = {cell: _cell_key(run, cell) for cell in cells}
    states = cellmod.cell_states(stores)
    pending = [c for c in cells if states.get(keys[c]) not in accounting.FINISHED_STATUSES]
    redo = sum(1 for c in pending if keys[c] in states)
    log(f"[sweep {config.name}] {len(cells)} cells: {len(cells) - len(pending)} cached (skipped), "
        f"{len(pending)} to run" + (f" ({redo} incomplete, redoing their failures)" if redo else ""))
    caption_stats: dict = {}
    judge_stats: dict = {"sent": 0, "cached": 0}
    if pending:
        if _needs_ray(config, pending):
            init_ray(verbose=verbose)

        def judge(round_run: SweepRun, cells_now: list[ResultCell], partial=frozenset()):
            return _caption_and_judge(round_run, cells_now, keys, partial=partial)

        try:
            if config.options.decide is not None:  # adaptive: videos in rounds until each pair is decided
                caption_stats, stats = run_adaptive(run, cells, pending, keys, judge)
            else:
                caption_stats, stats = judge(run, pending)
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the record says what this run did and paid
            _finish(run, ledger, cells, keys, pending, recovered, {}, judge_stats, interrupted=stop)
            raise
        judge_stats.update(stats)
    return _finish(run, ledger, cells, keys, pending, recovered, caption_stats, judge_stats)


def _finish(run: SweepRun, ledger: CostLedger, cells: list[ResultCell], keys: dict[ResultCell, str],
            pending: list[ResultCell], recovered: list[str], caption_stats: dict, judge_stats: dict,
            interrupted: KeyboardInterrupt | None = None) -> SweepResult:
    """The run's accounting, cost and record (run.json); the results files too unless the run was `interrupted`
    (then its record has status "interrupted" and the cost of what it made before the signal)."""
    cell_keys = [keys[c] for c in cells]
    release_unused_memory()  # what the judge stage freed goes back before the end reads the committed cells
    account = _account(run.stores, cell_keys)
    results = results_table(run.stores.metrics, cell_keys)
    # Arrow's allocator keeps what reading and hashing the committed verdicts freed (~60 MB at a 100,000-row
    # cell, for ~3 MB of live columns); the ledger's Python objects and the run record cannot reuse it
    release_unused_memory()
    results, cost = ledger.finish(results, cells, keys)  # tokens and USD per cell
    release_unused_memory()
    if interrupted is None:
        write_results_files(results, run.out)
    result = SweepResult(results, len(cells), len(cells) - len(pending), len(pending), caption_stats, judge_stats,
                         time.perf_counter() - run.started, run.out, account,
                         account.exit_code(run.max_failure_share), len(recovered), cost=cost,
                         datasets=dataset_records(run.datasets, run.config.path.parent))
    record_run(result, run, cell_keys, interrupted=interrupted)
    return result


def _load(spec, config: SweepConfig, out: Path) -> LoadedDataset:
    """Load a dataset; a disk that refuses the generated videos (synthetic kind) is a one-line storage error."""
    try:
        return load_dataset(spec, out_dir=out, sweep_dir=config.path.parent,
                            require_media=media_required(config, spec))
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO):
            raise
        raise storage_error(exc, out / "videos", f"the videos of dataset {spec.name!r}") from exc


def _cell_key(run: SweepRun, cell: ResultCell) -> str:
    cc = cell.caption
    extra = {"source_digest": file_digest(cc.source.path)} if cc.from_file else {}
    return cell.key(dataset_digest=run.data(cc).digest,
                    captioner_revision="" if cc.from_file else run.captioner_revisions[cc.captioner.display],
                    prompt_text=cc.prompt_key_text(), judge_revision=run.judge_revisions[cell.judge.display],
                    **extra)


def _account(stores: RunStores, cell_keys: list[str]) -> accounting.RunAccount:
    """Items by status over every cell of the sweep (run now or earlier), from the committed verdicts."""
    states = cellmod.cell_states(stores)
    account = accounting.RunAccount()
    for key in dict.fromkeys(cell_keys):
        verdicts = cellmod.stored_verdicts(stores, key, accounting.ACCOUNT_COLUMNS)
        if verdicts is not None:
            account.add_cell(verdicts, states.get(key, accounting.COMPLETE))
    return account


def _caption_and_judge(run: SweepRun, pending: list[ResultCell], keys: dict[ResultCell, str], *,
                       partial: frozenset = frozenset()) -> tuple[dict, dict]:
    """Caption what the pending cells need and judge them (engine/sweep/judge_stage.py): overlapped (default; the
    captions are made on a background thread while the judge works on the cells' captioned videos) or stage after
    stage. Returns the caption stage's and the judge stage's counts. `partial`: keys of cells judged on part of
    their videos (an adaptive sweep's round), committed as pending."""
    config = run.config
    stage = JudgeStage(run, pending, keys, partial=partial)

    def caption(watch=None):
        return caption_cells_for(pending, run, watch=watch)

    overlap, why_not = _overlap_fits(config)
    if config.options.overlap and not overlap:
        run.log(f"[sweep {config.name}] captioning, then judging (no overlap): {why_not}")
    try:
        if not overlap:
            outcome = caption()
            judge_after_captions(stage, cellmod.load_inputs(run.stores, outcome))
            return outcome.stats, stage.stats
        inputs = cellmod.load_inputs(run.stores, CaptionOutcome())  # what exists now; the feed adds what is made
        thread = CaptionThread(caption).start()
        try:
            judge_while_captioning(stage, thread.watch, inputs)
        finally:
            thread.stop()  # normally ended already; after an error no new video is started
        if thread.watch.error is not None:
            raise thread.watch.error
        return thread.outcome.stats, stage.stats
    finally:
        stage.close()


def _needs_ray(config: SweepConfig, pending: list[ResultCell]) -> bool:
    """Whether running these cells uses Ray: captioning (caption actors, decode tasks), frames decoded for a judge
    that sees them, judge actors, an adaptive sweep's rounds. A sweep that only judges given captions with an
    in-process judge does not start it (starting a local Ray costs seconds of a 2-core machine)."""
    if config.options.judge_actors or config.options.decide is not None:
        return True
    return any(not c.caption.from_file or judge_sees_frames(c.protocol.name) for c in pending)


def _overlap_fits(config: SweepConfig) -> tuple[bool, str]:
    """Overlapping needs the caption actors, the judge actors and a decode task on the cluster at once: a judge actor
    holding the last free CPU would starve the decode tasks the caption stage waits for (stage after stage, the
    caption actors are gone before the judge actors start)."""
    if not config.options.overlap:
        return False, "options.overlap = false"
    opts = config.options
    if not opts.judge_actors:
        return True, ""
    import ray

    have = ray.cluster_resources()
    need_cpu = (0 if opts.gpus_per_actor else opts.caption_actors) + opts.judge_actors + 1  # + 1: a decode task
    need_gpu = opts.gpus_per_actor * opts.caption_actors + (opts.judge_actors if have.get("GPU", 0) else 0)
    if need_cpu > have.get("CPU", 0):
        return False, (f"{opts.caption_actors} caption actor(s), {opts.judge_actors} judge actor(s) and a decode task "
                       f"need {need_cpu:g} CPUs at once; the cluster has {have.get('CPU', 0):g}")
    if need_gpu > have.get("GPU", 0):
        return False, (f"caption and judge actors need {need_gpu:g} GPUs at once; the cluster has "
                       f"{have.get('GPU', 0):g}")
    return True, ""

