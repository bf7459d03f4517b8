"""A sweep's judge stage: per judge, all its pending cells through one streaming loop (JudgeScheduler), each cell's
verdicts accounted for, its metrics computed and both committed as soon as the cell is complete.

Two ways to get there (`[options] overlap`):
- `judge_after_captions`: every caption exists already; each cell's whole request table is added at once (a big
  `[[captions]]` cell: in parts built as the judge reaches them, JudgeStage.prepare).
- `judge_while_captioning`: the caption stage runs on a background thread (engine/sweep/overlap.py); each cell starts
  empty and grows part by part as its videos' captions are made, then is sealed. Same verdicts, same metrics.

Each cell's judge transcripts (engine/store/transcripts.py) are spooled while it is judged and committed as
`transcripts/<cell_key>.parquet` just before its verdicts (engine/sweep/cells.py rolls them back together).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine.judging.scheduler import JudgeScheduler, VerdictHandover
from capeval.engine.memory import RELEASE_ROWS, release_unused_memory
from capeval.engine.metrics.reasons import explain_nulls
from capeval.engine.protocols.base import REQUESTS_WITH_CONTEXT
from capeval.engine.registry import lookup
from capeval.engine.store.transcripts import CaptionTexts, CommitForm, TranscriptSpool
from capeval.engine.sweep import accounting
from capeval.engine.sweep import cells as cellmod
from capeval.engine.sweep.breakdowns import cell_breakdowns
from capeval.engine.sweep.config import ComponentSpec
from capeval.engine.sweep.datasets import LoadedDataset, judge_sees_frames
from capeval.engine.sweep.decide import PENDING
from capeval.engine.sweep.grid import ResultCell
from capeval.engine.sweep.overlap import CellFeed
from capeval.engine.sweep.pairs import forget_table
from capeval.engine.sweep.run import SweepRun
from capeval.kernels.bootstrap import warm as warm_bootstrap

PART_ITEMS = 512  # items per part of a [[captions]] cell built in parts (JudgeStage.prepare)
# A cell built in parts hands freed memory back every this many parts (~8,000 items): what building each part's
# requests and handling their answers freed is kept by the allocators between the verdict rows the cell holds, and
# the judging's level grew with the cell's size (at 100,000 requests the end of the judging was the run's peak)
RELEASE_PARTS = 16
# Item columns a run keeps once every request of a dataset's cells is built: the ids, what the run record, the
# media types, the scene cuts and the caption matching read (LoadedDataset, engine/sweep/cells.py), and the category;
# the protocols' metrics read those they declare (JudgeProtocol.metric_columns["items"]). The rest (the question,
# its options, the reference answer) only builds requests: 17 of a 100,000-item multiple-choice table's 24 MB.
KEPT_ITEM_COLUMNS = ("benchmark", "task", "item_id", "video_id", "media_path", "media_type", "category", "extra")


@dataclass
class Prepared:
    """A cell ready for the judge's verdicts: what the accounting and the metrics need afterwards."""

    cell: ResultCell
    key: str
    protocol: object
    items: object
    captions: object
    video_failures: dict


class JudgeStage:
    """State shared by the pending cells of one judge pass of a sweep run: the run, the cells' keys, the judges
    (opened once each), counts."""

    def __init__(self, run: SweepRun, pending: list[ResultCell], keys: dict[ResultCell, str], *,
                 partial: frozenset = frozenset()):
        self.run, self.pending, self.keys = run, pending, keys
        self.config, self.stores = run.config, run.stores
        self.partial = partial  # keys of cells judged on part of their videos (engine/sweep/decide_rounds.py)
        self.judges: dict = {}
        self.spools: dict = {}  # cell key -> TranscriptSpool of a cell being judged
        self.caption_texts: dict[str, CaptionTexts] = {}  # cell key -> the captions its requests judge
        self.stats = {"sent": 0, "cached": 0}
        self.done = 0
        # dataset name -> this stage's cells of it whose requests are not all built yet (`built`)
        self.unbuilt = Counter(cell.caption.dataset.name for cell in pending)
        self.prepared: dict[str, Prepared] = {}  # cell key -> the cell prepared and not finished yet

    def close(self) -> None:
        for spool in self.spools.values():  # cells not finished: their transcripts are redone with them
            spool.discard()
        self.spools.clear()
        for j in self.judges.values():
            j.close()

    def transcripts(self, cell: ResultCell):
        """The sink of the cell's judge transcripts (spooled under the run folder's transcripts/). A cell without
        official retry rounds has no corrections at its end: its rows are written in their committed form as they
        come (the captions its requests are built from are added to `caption_texts` first, `build`)."""
        key = self.keys[cell]
        texts = self.caption_texts.setdefault(key, CaptionTexts())
        protocol = lookup("protocol", cell.protocol.name)
        rounds = protocol.judging_policy(**cell.protocol.params).stop_when_failed_at_most is not None
        self.spools[key] = TranscriptSpool(self.stores.transcripts, key,
                                           commit_as=None if rounds else CommitForm(texts, key))
        return self.spools[key]

    def by_judge(self) -> list[list[ResultCell]]:
        groups: dict[str, list[ResultCell]] = {}
        for cell in self.pending:
            groups.setdefault(cell.judge.display, []).append(cell)
        return list(groups.values())

    def judge_for(self, jspec: ComponentSpec):
        if jspec.display not in self.judges:
            opts = self.config.options
            if opts.judge_actors:  # engines on Ray actors (one per GPU), fed with backpressure
                from capeval.adapters.ray_pool import JudgePool  # deferred: Ray

                self.judges[jspec.display] = JudgePool(jspec.name, jspec.params, num_actors=opts.judge_actors,
                                                       batch_size=opts.judge_batch_size,
                                                       max_restarts=opts.max_restarts)
            else:
                self.judges[jspec.display] = lookup("judge", jspec.name)(**jspec.params)
        return self.judges[jspec.display]

    def warm_end(self) -> None:
        """Set-up the end of a judge pass needs, done while the loop waits for its last answers (JudgeScheduler
        on_drain): the bootstrap kernel's first load (Numba's compiler context) and pyarrow.dataset (read_table).
        What the judging freed goes back first: the compiler's own memory would otherwise stack on top of it (at
        100,000 requests the drain was the run's peak)."""
        import pyarrow.dataset  # noqa: F401

        release_unused_memory()
        if self.config.options.n_resamples:
            warm_bootstrap()

    def scheduler(self, judge):
        return JudgeScheduler(judge, self.stores.judge_cache, batch_size=self.config.options.judge_batch_size,
                              progress=self.run.progress, warn_failure_share=self.config.options.warn_failure_share)

    # -- one cell -------------------------------------------------------------------------------------------------
    def data(self, cell: ResultCell) -> LoadedDataset:
        return self.run.data(cell.caption)

    def prepare(self, cell: ResultCell, judge, inputs, *,
                requests: bool = True) -> tuple[Prepared, list[pa.Table | Callable[[], pa.Table]]]:
        """The cell's captions, items and video failures, and (with `requests`) its first-step requests as parts:
        the whole table, or for a big `[[captions]]` cell parts of about PART_ITEMS items (whole videos) each built
        when the judge reaches it (`_lazy_parts`), so the cell holds one part's requests at a time."""
        protocol = lookup("protocol", cell.protocol.name)
        data = self.data(cell)
        captions, video_failures = cellmod.cell_captions(cell, self.run, inputs)
        items = cellmod.cell_items(cell, data)
        extra = {}
        if requests and judge_sees_frames(cell.protocol.name):  # the judge sees frames: decode them at its spec
            frames, frame_failures = cellmod.judge_frames(cell, self.run, inputs)
            extra["frames"] = frames
            if "judge_frames" not in cell.protocol.params:  # the spec they were decoded at (a file's "file" is none)
                extra["judge_frames"] = cellmod.judge_frames_spec(cell)
            video_failures = {**frame_failures, **video_failures}  # a failed caption explains the row first
        prep = Prepared(cell, self.keys[cell], protocol, items, captions, video_failures)
        self.prepared[prep.key] = prep
        if not requests:
            return prep, []
        if not extra and (parts := self._lazy_parts(prep, judge)) is not None:
            return prep, parts
        whole = self.build(cell, protocol, judge, items, captions, **extra)
        self.built(cell)
        return prep, [whole]

    def _lazy_parts(self, prep: Prepared, judge) -> list[Callable[[], pa.Table]] | None:
        """Builders of a `[[captions]]` cell's requests, PART_ITEMS items (whole videos) each; the judge loop puts
        the verdicts of a cell received in parts back in request order, so they are those of the whole table. None
        (build it whole) for a small cell, a policy that needs every row at the seal (official retry rounds count
        groups of items), or an item id that two videos share (its rows could span two parts)."""
        cell, items = prep.cell, prep.items
        if (not cell.caption.from_file or items.num_rows <= PART_ITEMS
                or prep.protocol.judging_policy(**cell.protocol.params).stop_when_failed_at_most is not None):
            return None
        # on the id columns, not as Python values: two lists of every item's ids and a dict of them were ~25 MB at
        # 100,000 items, left in the interpreter's arenas for the rest of the run
        item_ids, video_ids = items.column("item_id"), items.column("video_id")
        if item_ids.null_count or video_ids.null_count:
            return None
        item_codes, video_codes = _first_seen_codes(item_ids), _first_seen_codes(video_ids)
        by_item = np.argsort(item_codes, kind="stable")
        same_item = item_codes[by_item][1:] == item_codes[by_item][:-1]
        if (video_codes[by_item][1:] != video_codes[by_item][:-1])[same_item].any():
            return None
        # each video's rows together (ascending), videos in the order they first appear; parts of whole videos,
        # each as an int64 array: the builders are held until the judge has built every part
        order = np.argsort(video_codes, kind="stable")
        ends, size, end = [], 0, 0
        for count in np.bincount(video_codes).tolist():
            end, size = end + count, size + count
            if size >= PART_ITEMS:
                ends.append(end)
                size = 0
        if size:
            ends.append(end)
        parts = [pa.array(order[start:stop], pa.int64()) for start, stop in zip([0, *ends[:-1]], ends)]

        own = self.unbuilt[cell.caption.dataset.name] == 1 and bool(self.prompt_columns(cell.caption.dataset.name))
        if own:
            # The dataset's last cell to build: each part holds a copy of its own items, and the run's table lets go
            # of the columns only requests read now, so they go part by part as the judge builds them, not all at
            # the end (~18 MB held through a 100,000-item cell's judging). Cells built before it shared the table.
            owned = [items.take(rows) for rows in parts]
            self.let_go_of_prompts(cell.caption.dataset.name)
            items = None
        else:
            owned = [None] * len(parts)

        def builder(n: int, part_rows: pa.Array, part: pa.Table | None) -> Callable[[], pa.Table]:
            def build() -> pa.Table:
                nonlocal part
                if n and n % RELEASE_PARTS == 0:
                    release_unused_memory()
                part, these = None, part if part is not None else items.take(part_rows)
                # an item pairs with the captions its item_id or its video_id names (pair_items_captions)
                ids = pa.array(set(these.column("item_id").to_pylist()) | set(these.column("video_id").to_pylist()),
                               pa.string())
                captions = prep.captions.filter(pc.is_in(prep.captions.column("video_id"), value_set=ids))
                requests = self.build(cell, prep.protocol, judge, these, captions, keep_texts=False)
                if n == len(parts) - 1:
                    self.built(cell)
                return requests
            return build

        # the transcripts look captions up in the cell's whole table, not in each part's filtered copy
        self.caption_texts.setdefault(prep.key, CaptionTexts()).add(prep.captions)
        return [builder(n, rows, part) for n, (rows, part) in enumerate(zip(parts, owned))]

    def build(self, cell: ResultCell, protocol, judge, items, captions, *, keep_texts: bool = True,
              **extra) -> pa.Table:
        """The protocol's first-step requests for these items and captions under the cell's judge seeds and params
        (with `keep_texts`, the captions kept for the cell's transcripts first; without, the caller has added them)."""
        if keep_texts:
            self.caption_texts.setdefault(self.keys[cell], CaptionTexts()).add(captions)
        return protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                       seeds=list(cell.judge.seeds), **extra, **cell.protocol.params)

    def built(self, cell: ResultCell) -> None:
        """Every request of `cell` is built: once all of this stage's cells of its dataset are, the run lets go of
        the item columns only requests read (`let_go_of_prompts`)."""
        name = cell.caption.dataset.name
        self.unbuilt[name] -= 1
        if self.unbuilt[name] == 0:
            self.let_go_of_prompts(name)

    def prompt_columns(self, name: str) -> list[str]:
        """The columns of dataset `name`'s table that only requests read: none when a protocol of its cells
        declares no metric columns (its metrics read every column), the sweep breaks results down by item
        attributes, or it is adaptive (its rounds build requests from the run's tables again)."""
        if self.config.options.breakdowns or self.config.options.decide is not None:
            return []
        keep = set(KEPT_ITEM_COLUMNS)
        for cell in self.pending:
            if cell.caption.dataset.name == name:
                declared = _declared_columns(lookup("protocol", cell.protocol.name), "items")
                if declared is None:
                    return []
                keep.update(declared)
        return [c for c in self.run.datasets[name].items.column_names if c not in keep]

    def let_go_of_prompts(self, name: str) -> None:
        """The run's table of dataset `name`, and the prepared cells' items of it, keep all but its
        `prompt_columns`. Other holders of the table (the checks' read views and pair plan) let go of it too, so its
        memory goes."""
        drop = self.prompt_columns(name)
        if not drop:
            return
        loaded = self.run.datasets[name]
        self.run.datasets[name] = dataclasses.replace(loaded, items=loaded.items.drop_columns(drop))
        forget_table(self.config.pairs, loaded.items)
        for prep in self.prepared.values():
            if prep.cell.caption.dataset.name == name:
                prep.items = prep.items.drop_columns([c for c in drop if c in prep.items.column_names])

    def finish(self, prep: Prepared, verdicts: VerdictHandover, summary) -> None:
        """Account for every item, commit the verdicts, compute the metrics and commit them (the commit point)."""
        cell, key = prep.cell, prep.key
        self.prepared.pop(key, None)
        spool, transcripts = self.spools.pop(key, None), None
        texts = self.caption_texts.pop(key, None)
        if spool is not None:  # written on a thread while the verdicts are classified, placed before them
            transcripts = (spool.commit_later() if spool.commit_as is not None
                           else spool.commit_later(captions=texts, cell_key=key))
        try:
            self._finish(prep, verdicts.take(), summary, transcripts)
        except BaseException:
            if spool is not None:
                transcripts.abandon()
                self.spools[key] = spool  # not committed: discarded with the stage (close)
            raise

    def _finish(self, prep: Prepared, verdicts: pa.Table, summary, transcripts) -> None:
        cell, key = prep.cell, prep.key
        verdicts = accounting.classify_verdicts(verdicts, prep.video_failures)
        status = accounting.cell_status(verdicts, self.run.accept_failures)
        if key in self.partial and status in accounting.FINISHED_STATUSES:
            status = PENDING  # an adaptive sweep stopped judging it early: not finished (a rerun can finish it)
        # the committed rows name their cell
        verdicts = verdicts.append_column("cell_key", pa.array([key] * verdicts.num_rows, pa.string()))
        if transcripts is not None:  # before the verdicts: a committed cell always has its transcripts
            transcripts.place()
        cellmod.commit_verdicts(self.stores, key, verdicts)
        options = self.config.options
        if not options.breakdowns:  # written: only what the metrics and their reasons read is held through them
            verdicts = verdicts.select(_read_by_metrics(prep.protocol, verdicts))
        big = verdicts.num_rows >= RELEASE_ROWS
        if big:  # the unsorted chunks, the accounting's lists and the columns let go are freed
            release_unused_memory()
        # the metrics get the judged rows as they were before the accounting and the commit added their columns
        added = [c for c in ("item_status", "retryable", "cell_key") if c in verdicts.column_names]
        inputs = _metric_inputs(prep.protocol, verdicts=verdicts.drop_columns(added), items=prep.items,
                                captions=prep.captions)
        metrics = prep.protocol.compute_metrics(
            inputs.pop("verdicts"), **inputs, n_resamples=options.n_resamples, seed=0,
            **prep.protocol.metric_params(cell.protocol.params))
        del inputs
        metrics = explain_nulls(metrics, verdicts, captions=prep.captions)  # no verdicts: null + reason, never 0
        if options.breakdowns:  # per level of item attributes too (engine/sweep/breakdowns.py)
            metrics = cell_breakdowns(metrics, prep.protocol, verdicts, options.breakdowns, items=prep.items,
                                      captions=prep.captions, n_resamples=options.n_resamples,
                                      metric_params=prep.protocol.metric_params(cell.protocol.params),
                                      duration_buckets=cell.protocol.params.get("duration_buckets"),
                                      log=self.run.log, label=" ".join(f"{k}={v}" for k, v in cell.labels().items()))
        metrics = cellmod.label_metrics(metrics, cell, key, status)
        del verdicts
        if big:  # the metrics' polars frames and bootstrap arrays are freed
            release_unused_memory()
        cellmod.commit_metrics(self.stores, key, metrics.to_arrow())
        self.stats["sent"] += summary.sent
        self.stats["cached"] += summary.cached
        self.done += 1
        self.run.log(f"[sweep {self.config.name}] cell {self.done}/{len(self.pending)} {status}: "
                 + " ".join(f"{k}={v}" for k, v in cell.labels().items()))


def _first_seen_codes(values: pa.ChunkedArray) -> np.ndarray:
    """Each value's number, values numbered in the order they first appear."""
    return pc.index_in(values, value_set=pc.unique(values)).to_numpy()


def _read_by_metrics(protocol, verdicts: pa.Table) -> list[str]:
    """The verdict columns a cell's metrics and their reasons (explain_nulls) read: those the protocol declares
    (JudgeProtocol.metric_columns) and the verdict, its status and error columns; every column when it declares
    none."""
    declared = _declared_columns(protocol, "verdicts")
    if declared is None:
        return verdicts.column_names
    keep = set(declared) | {"verdict", "parse_status", "error", "item_status"}
    return [c for c in verdicts.column_names if c in keep]


def _declared_columns(protocol, table: str) -> tuple[str, ...] | None:
    """The columns of `table` ("verdicts", "items", "captions") the protocol's metrics read
    (JudgeProtocol.metric_columns); None: it declares none, so they read every column."""
    return (getattr(protocol, "metric_columns", None) or {}).get(table)


def _metric_inputs(protocol, **tables: pa.Table) -> dict:
    """The tables compute_metrics gets, as polars frames: only the columns the protocol declares it reads
    (JudgeProtocol.metric_columns; those a table has), else whole."""
    import polars as pl

    out = {}
    for name, table in tables.items():
        cols = _declared_columns(protocol, name)
        out[name] = pl.from_arrow(table if cols is None else
                                  table.select([c for c in cols if c in table.schema.names]))
    return out


def judge_after_captions(stage: JudgeStage, inputs) -> None:
    """Every caption exists: per judge, each cell's whole request table into one scheduler."""
    for cells in stage.by_judge():
        judge = stage.judge_for(cells[0].judge)
        sched = stage.scheduler(judge)
        for cell in cells:
            prep, parts = stage.prepare(cell, judge, inputs)
            whole = len(parts) == 1 and not callable(parts[0])
            sched.add(parts[0] if whole else REQUESTS_WITH_CONTEXT.empty_table(), prep.protocol, name=prep.key,
                      protocol_params=dict(cell.protocol.params), transcripts=stage.transcripts(cell),
                      sealed=whole,
                      on_complete=lambda name, verdicts, summary, prep=prep: stage.finish(prep, verdicts, summary))
            if not whole:  # built in parts: the loop puts the verdicts back in request order
                sched.extend_all(prep.key, parts)
                sched.seal(prep.key)
            del parts  # each builder goes once the loop has built its part (they hold the cell's whole items)
        sched.run(on_drain=stage.warm_end)


def judge_while_captioning(stage: JudgeStage, watch, inputs) -> None:
    """Captions are being made on another thread (`watch` hears of them): per judge, each cell starts empty and
    grows by the requests of its videos as they are captioned (engine/sweep/overlap.CellFeed)."""
    for cells in stage.by_judge():
        judge = stage.judge_for(cells[0].judge)
        sched = stage.scheduler(judge)
        preps: dict[str, Prepared] = {}
        streamed = {c: _part_items(c, stage.data(c)) for c in cells
                    if not judge_sees_frames(c.protocol.name) and not c.caption.from_file}

        def start(cell: ResultCell) -> None:
            protocol = lookup("protocol", cell.protocol.name)
            key = stage.keys[cell]
            sched.add(REQUESTS_WITH_CONTEXT.empty_table(), protocol, name=key,
                      protocol_params=dict(cell.protocol.params), sealed=False, transcripts=stage.transcripts(cell),
                      on_complete=lambda name, verdicts, summary: stage.finish(preps[name], verdicts, summary))

        def part(cell: ResultCell, videos: list[str]) -> None:
            if cell not in streamed:
                return  # judged whole at its seal
            items, by_video, _ = streamed[cell]
            rows = [i for v in videos for i in by_video.get(v, ())]
            if not rows:
                return
            captions, _ = cellmod.cell_captions(cell, stage.run, inputs, videos=videos)
            protocol = lookup("protocol", cell.protocol.name)
            sched.extend(stage.keys[cell], stage.build(cell, protocol, judge, items.take(sorted(rows)), captions))

        def seal(cell: ResultCell) -> None:
            if cell not in streamed:
                prep, parts = stage.prepare(cell, judge, inputs)
                sched.extend_all(prep.key, parts)
            else:
                prep, _ = stage.prepare(cell, judge, inputs, requests=False)
                items, _, leftover = streamed[cell]
                if leftover:  # items of no video of the dataset: what the protocol makes of them with no caption
                    sched.extend(prep.key, stage.build(cell, prep.protocol, judge, items.take(leftover),
                                                       prep.captions))
                stage.built(cell)
            preps[prep.key] = prep
            sched.seal(prep.key)

        feed = CellFeed(watch, cells, run=stage.run, inputs=inputs, start=start, part=part, seal=seal)
        sched.run(source=feed, on_drain=stage.warm_end)


def _part_items(cell: ResultCell, data: LoadedDataset) -> tuple[pa.Table, dict[str, list[int]], list[int]]:
    """The cell's items, the row indices of each video's items, and the rows of items with no video of the
    dataset. An item belongs to the video its caption is matched by (capeval.engine.protocols.base.pair_items_captions:
    its own item_id when the dataset has media per item, else its video_id)."""
    items = cellmod.cell_items(cell, data)
    videos = data.videos
    by_video: dict[str, list[int]] = {}
    leftover: list[int] = []
    for i, (item, vid) in enumerate(zip(items.column("item_id").to_pylist(), items.column("video_id").to_pylist())):
        owner = item if item in videos else vid if vid in videos else None
        if owner is None:
            leftover.append(i)
        else:
            by_video.setdefault(owner, []).append(i)
    return items, by_video, leftover
