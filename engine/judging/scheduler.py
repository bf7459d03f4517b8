"""Whole-sweep judging through one window per judge (issue 11): `JudgeScheduler`.

A sweep has many cells (dataset x captioner x prompt x frames x protocol) judged by the same judge. Judging them one
after another leaves the judge idle at every cell's tail (its slowest answers, its next steps). The scheduler puts
the requests of all its cells through ONE streaming loop (engine/judging/loop.py): one bounded in-flight window,
rows merged across cells in caption order (requests sharing a caption -- e.g. the same captions judged by two
protocols -- stay adjacent for the prefix cache), identical requests of different cells sent once. Each cell keeps
its own protocol, JudgingPolicy (re-asks, official rounds) and summary, and its completion callback is called with
its VERDICTS table (a `VerdictHandover`: the callback takes the table) as soon as that cell is complete, while the
other cells are still being judged.

    sched = JudgeScheduler(judge, cache_dir)  # the window: the judge's own max_in_flight
    for cell in cells:
        sched.add(cell.requests, protocol, protocol_params=cell.params, name=cell.key,
                  on_complete=lambda name, verdicts, summary: store(name, verdicts.take()))
    sched.run()  # returns {name: (verdicts, summary)} for cells without a callback

Callbacks run on the calling thread, between answers; a callback may `add` further cells (e.g. cells whose captions
were just made). The verdict table of a cell is exactly what `run_judging` would return for it alone.

Streamed cells (captioning and judging overlap in a sweep): `add(..., sealed=False)` starts a cell with the requests
of the videos captioned so far, `extend(name, requests)` adds those of the next videos, `seal(name)` says no more
will come. `run(source=...)` keeps judging while `source.open`, calling `source.poll(timeout)` (on this thread)
whenever it could use more work; the source adds, extends and seals cells from there. A streamed cell's verdict
table is the one a single `add` of all its requests would give (parts hold whole items; see cells.Cell.table).
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pyarrow as pa

from capeval.engine.protocols.base import JudgeProtocol, JudgingPolicy

from .cells import Cell
from .live import WARN_FAILURE_SHARE
from .loop import JudgeLoop
from .summary import JudgingSummary
from capeval.engine.registry import lookup



class VerdictHandover:
    """A finished cell's VERDICTS table on its way to the cell's completion callback, which takes it (`take`): no
    frame between the judging loop and the callee keeps the table alive, so the callee can let go of the columns it
    is done with (a 100,000-row cell's rows are ~21 MB)."""

    def __init__(self, table: pa.Table):
        self._table: pa.Table | None = table
        self.num_rows = table.num_rows

    def take(self) -> pa.Table:
        """The table (once: the handover then holds nothing)."""
        table, self._table = self._table, None
        if table is None:
            raise RuntimeError("VerdictHandover: the verdict table was taken already")
        return table


OnComplete = Callable[[str, VerdictHandover, JudgingSummary], None]


class JudgeScheduler:
    def __init__(self, judge, cache_dir: str | Path, *, max_in_flight: int | None = None, batch_size: int = 64,
                 use_cache: bool = True, progress: bool = False, claim_timeout_s: float | None = None,
                 warn_failure_share: float | None = WARN_FAILURE_SHARE):
        self.judge = judge
        self._loop = JudgeLoop(judge, cache_dir, max_in_flight=max_in_flight, batch_size=batch_size,
                               use_cache=use_cache, progress=progress, claim_timeout_s=claim_timeout_s,
                               warn_failure_share=warn_failure_share)
        self._results: dict[str, tuple[pa.Table, JudgingSummary]] = {}
        self._t0: dict[str, float] = {}
        self._cells: dict[str, Cell] = {}

    def add(self, requests: pa.Table, protocol: JudgeProtocol | str, *, name: str,
            policy: JudgingPolicy | None = None, protocol_params: dict | None = None, max_reasks: int | None = None,
            on_complete: OnComplete | None = None, keep_intermediate: bool = False, max_steps: int = 8,
            sealed: bool = True, transcripts=None) -> None:
        """Queue one cell. `policy` defaults to protocol.judging_policy(**protocol_params) (as run_judging).
        sealed=False: more of its requests will come (`extend`), until `seal`. `transcripts`: a sink
        (engine/store/transcripts.py) that gets the cell's transcript rows, finished before `on_complete`."""
        if name in self._cells:
            raise ValueError(f"JudgeScheduler: a cell named {name!r} was added already")
        if isinstance(protocol, str):
            protocol = lookup("protocol", protocol)
        if "context" not in requests.column_names:
            raise ValueError(f"cell {name!r}: requests lack the 'context' column: build them with "
                             "protocol.build_requests")
        if policy is None:
            policy = protocol.judging_policy(**(protocol_params or {}))
        if max_reasks is not None:
            policy = replace(policy, max_reasks=int(max_reasks))
        self._t0[name] = time.perf_counter()

        def done(cell: Cell, table: pa.Table) -> None:
            cell.summary.requests = table.num_rows
            cell.summary.wall_s = time.perf_counter() - self._t0[name]
            if on_complete is None:
                self._results[name] = (table, cell.summary)
            else:
                handover = VerdictHandover(table)
                del table  # the callee's `take` holds the only reference
                on_complete(name, handover, cell.summary)

        cell = Cell(requests, protocol, policy, judge_name=self.judge.name, judge_revision=self.judge.revision,
                    keep_intermediate=keep_intermediate, max_steps=max_steps, on_complete=done, name=name,
                    sealed=sealed, transcripts=transcripts)
        self._cells[name] = cell
        self._loop.add(cell)

    def extend(self, name: str, requests: pa.Table) -> None:
        """More first-step requests of an unsealed cell (whole items: every row of an item in one call)."""
        self._cells[name].extend(requests)

    def extend_all(self, name: str, parts: list) -> None:
        """`extend` with each of `parts` in order (tables, or functions that build one when the loop reaches it: no
        loop variable of the caller's keeps the last of them, and what it holds, alive through the judging)."""
        cell = self._cells[name]
        for part in parts:
            cell.extend(part)

    def seal(self, name: str) -> None:
        self._cells[name].seal()

    def run(self, source=None, *, on_drain: Callable[[], None] | None = None) -> dict[str, tuple[pa.Table, JudgingSummary]]:
        """Judge every added cell (and, with `source`, every cell it adds while open); returns (verdicts, summary)
        per cell added without a callback. Raises capeval.engine.errors.AbortedError like run_judging (cells completed
        before are delivered already). `on_drain`: called once, on a thread of its own, when every request is sent
        and only the last answers are awaited (the judge loop's thread is mostly idle then): set-up the end of the
        run needs (e.g. loading the metrics' kernels). Its errors are ignored; the end does that work itself."""
        self._loop.source = source
        watch = _DrainWatch(self._loop.feed, on_drain) if on_drain is not None else None
        try:
            self._loop.run()
        finally:
            if watch is not None:
                watch.stop()
        return self._results


class _DrainWatch:
    """Calls `work` once, on its own daemon thread, when `feed.draining` turns true (polled every POLL_S)."""

    POLL_S = 0.05

    def __init__(self, feed, work: Callable[[], None]):
        self.feed, self.work = feed, work
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="capeval-drain-warm", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.POLL_S):
            if self.feed.draining:
                try:
                    self.work()
                except Exception:  # noqa: BLE001 - a warm-up only: what it failed to do is done where needed
                    pass
                return

    def stop(self) -> None:
        """No call after this one (a call under way goes on: the work is safe to overlap with the caller's)."""
        self._stop.set()
