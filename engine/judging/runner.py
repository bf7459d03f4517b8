"""run_judging: requests -> judge (through the judgment cache) -> parsed VERDICTS, with re-asks and multi-step flows.

A thin front over the streaming loop (engine/judging/loop.py, cells.py): requests are looked up and claimed in the
cache just before sending, sent in caption order through a bounded in-flight window, committed as they arrive,
parsed, re-asked per the protocol's JudgingPolicy (each re-ask cached under its own key), and a unit's next step
(a multi-step protocol's answer -> score, extract -> entail) is asked as soon as that unit's answers are parsed. Every
request row yields exactly one verdict row: parsed, REPAIRED, FAILED (judge answered, nothing parseable, or dropped
by an official retry rule), ERROR (backend failed) or MISSING (no caption / upstream step failed). Nothing is dropped.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine.protocols.base import JudgeProtocol, JudgingPolicy

from .cells import Cell
from .loop import JudgeLoop
from .summary import JudgingSummary
from capeval.engine.registry import lookup
from capeval.engine.gc_thresholds import bulk_gc


@bulk_gc()
def run_judging(requests: pa.Table | Iterable[pa.Table | pa.RecordBatch], judge, *, cache_dir: str | Path, protocol: JudgeProtocol | str | None = None,
                batch_size: int = 64, max_reasks: int | None = None, progress: bool = True, max_steps: int = 8,
                keep_intermediate: bool = False, return_summary: bool = False, max_in_flight: int | None = None,
                policy: JudgingPolicy | None = None, protocol_params: dict | None = None, use_cache: bool = True,
                claim_timeout_s: float | None = None, transcripts=None):
    """Judge `requests` (from protocol.build_requests) with `judge` (capeval.adapters.base.Judge); returns VERDICTS (one row
    per request of every step, with the attempt that produced its answer), or (verdicts, JudgingSummary) with
    return_summary=True. The summary is also in the table's schema metadata under b"capeval.judging_summary".

    Streaming (engine/judging/loop.py): up to `max_in_flight` requests at the judge at any time (default: the
    judge's own `max_in_flight`; more than the judge takes is a UsageError, window.judge_window), fed continuously
    (backends with `stream()`), or in batches of at most `batch_size` otherwise. `policy` defaults to
    `protocol.judging_policy(**protocol_params)` (the run's protocol params: mode, prompts, ...); an explicit
    `max_reasks` overrides its re-ask budget. `use_cache=False` sends every request even if the cache has it (for
    benchmarking a judge); answers are still stored.

    Rows of intermediate steps (protocol.intermediate_steps, e.g. an "answer" or "extract" step) carry no verdict
    code; they are left out unless keep_intermediate=True. Nothing is lost: their text is in the judgment cache and
    in the next step's `detail`, and a failed intermediate step yields a next-step row without a verdict whose
    parse_status says why. Raises capeval.engine.errors.AbortedError when the backend refuses the run (401/403) or the
    cache cannot be written; what finished before is committed.

    `requests` may also be an iterable of tables or record batches (e.g. `pyarrow.parquet.ParquetFile.iter_batches`
    over a request file): they are read as the window needs them, so a run of millions of requests never holds them
    all. Each part must hold whole items (every row of an (item, caption) in one part); the verdict rows come in the
    parts' order.

    `transcripts`: a sink (capeval.engine.store.transcripts.MemoryTranscripts, TranscriptSpool) that receives one transcript
    row per request row (what was sent, every attempt, what came back); finished when this returns."""
    t0 = time.perf_counter()
    parts = None
    if not isinstance(requests, pa.Table):
        parts = iter(requests)
        first = next(parts, None)
        if first is None:
            raise ValueError("run_judging: the request iterable yielded nothing (pass an empty table instead)")
        requests = _as_table(first)
    if protocol is None:
        names = set(pc.unique(requests.column("protocol")).to_pylist()) if requests.num_rows else set()
        if len(names) != 1:
            raise ValueError(f"pass protocol=: requests hold protocols {sorted(names)}")
        protocol = names.pop()
    if isinstance(protocol, str):
        protocol = lookup("protocol", protocol)
    if "context" not in requests.column_names:
        raise ValueError("requests lack the 'context' column: build them with protocol.build_requests")
    if policy is None:
        policy = protocol.judging_policy(**(protocol_params or {}))
    if max_reasks is not None:
        policy = replace(policy, max_reasks=int(max_reasks))
    summary = JudgingSummary()
    cell = Cell(requests, protocol, policy, judge_name=judge.name, judge_revision=judge.revision,
                keep_intermediate=keep_intermediate, max_steps=max_steps, summary=summary, name=protocol.name,
                sealed=parts is None, part_order="input", transcripts=transcripts)
    loop = JudgeLoop(judge, cache_dir, max_in_flight=max_in_flight, batch_size=batch_size, use_cache=use_cache,
                     progress=progress, claim_timeout_s=claim_timeout_s)
    loop.add(cell)
    if parts is not None:
        loop.source = _PartReader(cell, parts)
    hedged_before = int(getattr(judge, "hedged_requests", 0) or 0)
    loop.run()
    summary.hedged = int(getattr(judge, "hedged_requests", 0) or 0) - hedged_before
    table = cell.table()
    summary.requests = table.num_rows
    summary.wall_s = time.perf_counter() - t0
    table = table.replace_schema_metadata({b"capeval.judging_summary": json.dumps(summary.as_dict()).encode()})
    return (table, summary) if return_summary else table


class _PartReader:
    """The loop's source for a streamed request table: the next part is read when the cell has none left queued."""

    def __init__(self, cell, parts: Iterator):
        self.cell, self.parts = cell, parts

    @property
    def open(self) -> bool:
        return not self.cell.sealed

    def poll(self, timeout: float) -> None:
        while not self.cell.sealed and self.cell.queued_parts == 0:
            part = next(self.parts, None)
            if part is None:
                self.cell.seal()
                return
            part = _as_table(part)
            if part.num_rows:
                self.cell.extend(part)
                return


def _as_table(part) -> pa.Table:
    return part if isinstance(part, pa.Table) else pa.Table.from_batches([part])

