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

import sys
import time
from pathlib import Path

from capeval.engine.prompts_library import get_prompt
from capeval.engine.ray_local import init_ray
from capeval.engine.sweep import accounting
from capeval.engine.sweep.caption_only import run_caption_only
from capeval.engine.sweep.config import ComponentSpec, SweepConfig
from capeval.engine.sweep.datasets import LoadedDataset, dataset_records, load_dataset, media_required
from capeval.engine.sweep.grid import Cell, expand
from capeval.engine.sweep.results import SweepResult, record_run, write_results_files
from capeval.engine.sweep.usage import CostLedger

__all__ = ["SweepResult", "run_sweep", "init_ray", "component_revision"]


def component_revision(kind: str, spec: ComponentSpec) -> str:
    """Identity of a captioner's/judge's weights without loading them: the class's `revision` when it is plain
    text, or its `static_revision(params)` classmethod (e.g. a hash of the model folder); params are keyed too."""
    from capeval.engine.registry import lookup

    cls = lookup(kind, spec.name)
    if hasattr(cls, "static_revision"):
        return str(cls.static_revision(spec.params))
    rev = getattr(cls, "revision", "")
    return rev if isinstance(rev, str) else ""


class _Stores:
    """The run folder's stores. Captions and the frames index are appended row by row (a caption as it is made, a
    video's frames rows as they are decoded), so they group-commit: a few hundred rows per segment, at most
    GroupCommit.interval_s of rows lost to a kill, compacted as they grow. Verdicts and metrics are the cells'
    commit points, written at once as named segments; a cell's verdicts first flush the captions and frames rows it
    was judged from, so a committed cell never refers to rows a kill could still lose."""

    def __init__(self, out: Path):
        from capeval.engine.schemas import CAPTIONS, FRAMES
        from capeval.engine.store import GroupCommit, SegmentStore

        group = GroupCommit.from_env()
        self.captions = SegmentStore(out / "captions", CAPTIONS, group=group)
        self.frames_index = SegmentStore(out / "frames_index", FRAMES, group=group)
        self.verdicts = SegmentStore(out / "verdicts", flush_before_put=(self.captions, self.frames_index))
        self.metrics = SegmentStore(out / "metrics")
        self.judge_cache = out / "judge_cache"
        self.frames = out / "frames"

    def close(self) -> None:
        """Commit what is buffered and compact the appended stores (the run folder at rest: a few files each)."""
        for store in (self.captions, self.frames_index):
            store.close()


def run_sweep(config: SweepConfig, out_dir: str | Path, *, progress: bool = True, log=None,
              exit_once_marker: str | None = None, accept_failures: bool = False, max_failure_share: float = 0.0,
              verbose: bool = False) -> SweepResult:
    """Run every unfinished cell of `config`, writing under `out_dir` (holding its lock); returns the results of
    all its cells, the item accounting and the exit code (OK, or FAILURES when the share of items without a
    verdict exceeds `max_failure_share`). Raises AbortedError (lock held, auth refused, disk full)."""
    from capeval.engine.store.lock import FolderLock

    out = Path(out_dir)
    with FolderLock(out, purpose=f"sweep {config.name}"):
        stores = _Stores(out)
        try:
            result = _run_locked(config, out, stores, progress=progress, log=log, exit_once_marker=exit_once_marker,
                                 accept_failures=accept_failures, max_failure_share=max_failure_share,
                                 verbose=verbose)
        except BaseException:
            try:  # keep what was made before the error (the run's own error is the one to report)
                stores.close()
            except Exception:  # noqa: BLE001
                pass
            raise
        stores.close()
        return result


def _run_locked(config: SweepConfig, out: Path, stores: _Stores, *, progress, log, exit_once_marker, accept_failures,
                max_failure_share, verbose) -> SweepResult:
    from capeval.engine.sweep import cells as cellmod

    t0 = time.perf_counter()
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    recovered = cellmod.recover(stores)
    ledger = CostLedger(config, stores)  # what the caches hold before this run (engine/sweep/usage.py)
    if recovered:
        log(f"[sweep {config.name}] rolled back {len(recovered)} cell(s) interrupted between verdicts and metrics")
    datasets = {d.name: _load(d, config, out) for d in config.datasets}
    cap_rev = {c.display: component_revision("captioner", c) for c in config.captioners}
    judge_rev = {j.display: component_revision("judge", j) for j in config.judges}
    if not config.protocols:  # caption-only sweep
        return run_caption_only(config, out, datasets, cap_rev, stores, progress=progress, log=log, verbose=verbose,
                                t0=t0, exit_once_marker=exit_once_marker, max_failure_share=max_failure_share)
    cells = expand(config, datasets, note=lambda text: log(f"[sweep {config.name}] note: {text}"))
    keys = {cell: _cell_key(cell, datasets, cap_rev, judge_rev) for cell in cells}
    states = cellmod.cell_states(stores)
    pending = [c for c in cells if states.get(keys[c]) not in accounting.FINISHED_STATUSES]
    redo = sum(1 for c in pending if keys[c] in states)
    log(f"[sweep {config.name}] {len(cells)} cells: {len(cells) - len(pending)} cached (skipped), "
        f"{len(pending)} to run" + (f" ({redo} incomplete, redoing their failures)" if redo else ""))
    caption_stats: dict = {}
    judge_stats: dict = {"sent": 0, "cached": 0}
    if pending:
        init_ray(verbose=verbose)

        def judge(run, data, partial=frozenset()):
            return _caption_and_judge(run, keys, data, config, stores, cap_rev, progress=progress,
                                      exit_once_marker=exit_once_marker, accept_failures=accept_failures, log=log,
                                      partial=partial)

        try:
            if config.options.decide is not None:  # adaptive: videos in rounds until each pair is decided
                from capeval.engine.sweep.decide_rounds import run_adaptive

                caption_stats, stats = run_adaptive(config, cells, pending, keys, datasets, stores, judge, log)
            else:
                caption_stats, stats = judge(pending, datasets)
        except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the record says what this run did and paid
            _finish(config, out, stores, ledger, cells, keys, pending, datasets, cap_rev, judge_rev, recovered, t0,
                    log, {}, judge_stats, max_failure_share, interrupted=stop)
            raise
        judge_stats.update(stats)
    return _finish(config, out, stores, ledger, cells, keys, pending, datasets, cap_rev, judge_rev, recovered, t0, log,
                   caption_stats, judge_stats, max_failure_share)


def _finish(config, out, stores, ledger, cells, keys, pending, datasets, cap_rev, judge_rev, recovered, t0, log,
            caption_stats, judge_stats, max_failure_share, interrupted: KeyboardInterrupt | None = None) -> SweepResult:
    """The run's accounting, cost and record (run.json); the results files too unless the run was `interrupted`
    (then its record has status "interrupted" and the cost of what it made before the signal)."""
    account = _account(stores, [keys[c] for c in cells])
    from capeval.engine.report import results_table

    results = results_table(stores.metrics, [keys[c] for c in cells])
    results, cost = ledger.finish(results, cells, keys, datasets, cap_rev)  # tokens and USD per cell
    if interrupted is None:
        write_results_files(results, out)
    result = SweepResult(results, len(cells), len(cells) - len(pending), len(pending), caption_stats, judge_stats,
                         time.perf_counter() - t0, out, account, account.exit_code(max_failure_share),
                         len(recovered), cost=cost, datasets=dataset_records(datasets, config.path.parent))
    record_run(result, config, cap_rev, judge_rev, [keys[c] for c in cells], log, interrupted=interrupted)
    return result


def _load(spec, config, out: Path) -> LoadedDataset:
    """Load a dataset; a disk that refuses the generated videos (synthetic kind) is a one-line storage error."""
    import errno

    try:
        return load_dataset(spec, out_dir=out, sweep_dir=config.path.parent,
                            require_media=media_required(config, spec))
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO):
            raise
        from capeval.engine.store.segments import storage_error

        raise storage_error(exc, out / "videos", f"the videos of dataset {spec.name!r}") from exc


def _cell_key(cell: Cell, datasets: dict, cap_rev: dict, judge_rev: dict) -> str:
    from capeval.engine.keys import file_digest

    cc = cell.caption
    from_file = getattr(cc, "from_file", False)
    prompt_text = cc.prompt_key_text() if hasattr(cc, "prompt_key_text") else get_prompt(cc.prompt_id).text
    extra = {"source_digest": file_digest(cc.source.path)} if from_file else {}
    return cell.key(dataset_digest=datasets[cc.dataset.name].digest,
                    captioner_revision="" if from_file else cap_rev[cc.captioner.display],
                    prompt_text=prompt_text, judge_revision=judge_rev[cell.judge.display], **extra)


def _account(stores, cell_keys: list[str]) -> accounting.RunAccount:
    """Items by status over every cell of the sweep (run now or earlier), from the committed verdicts."""
    from capeval.engine.sweep import cells as cellmod

    states = cellmod.cell_states(stores)
    account = accounting.RunAccount()
    for key in dict.fromkeys(cell_keys):
        verdicts = cellmod.stored_verdicts(stores, key)
        if verdicts is not None:
            account.add_cell(verdicts, states.get(key, accounting.COMPLETE))
    return account


def _caption_and_judge(pending: list[Cell], keys: dict, datasets: dict, config: SweepConfig, stores: _Stores,
                       cap_rev: dict, *, progress: bool, exit_once_marker, accept_failures: bool,
                       log, partial: frozenset = frozenset()) -> tuple[dict, dict]:
    """Caption what the pending cells need and judge them (engine/sweep/judge_stage.py): overlapped (default; the
    captions are made on a background thread while the judge works on the cells' captioned videos) or stage after
    stage. Returns the caption stage's and the judge stage's counts. `partial`: keys of cells judged on part of
    their videos (an adaptive sweep's round), committed as pending."""
    from capeval.engine.stages.pipeline import CaptionOutcome, caption_cells_for
    from capeval.engine.sweep import cells as cellmod
    from capeval.engine.sweep.judge_stage import JudgeStage, judge_after_captions, judge_while_captioning

    stage = JudgeStage(pending, keys, datasets, config, stores, cap_rev, progress=progress,
                       accept_failures=accept_failures, log=log, partial=partial)

    def caption(watch=None):
        return caption_cells_for(pending, datasets, config, stores, cap_rev, progress=progress,
                                 exit_once_marker=exit_once_marker, watch=watch)

    overlap, why_not = _overlap_fits(config)
    if config.options.overlap and not overlap:
        log(f"[sweep {config.name}] captioning, then judging (no overlap): {why_not}")
    try:
        if not overlap:
            outcome = caption()
            judge_after_captions(stage, cellmod.load_inputs(stores, outcome))
            return outcome.stats, stage.stats
        from capeval.engine.sweep.overlap import CaptionThread

        inputs = cellmod.load_inputs(stores, CaptionOutcome())  # what exists now; the feed adds what is made
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

