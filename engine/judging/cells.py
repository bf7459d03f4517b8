"""One judged cell inside the streaming loop: its request rows, their re-asks, units, next steps and verdict table.

A cell is one `run_judging` call (or one sweep cell handed to `JudgeScheduler`): a request table, a protocol and a
`JudgingPolicy`. Rows are pulled from the table in slices (never the whole table as Python dicts). A *unit* is the
rows sharing (item_id, task, caption_key, trial) at one step: when all of a unit's rows are final, the protocol's
`next_requests` is called for that unit alone, so the next step (a multi-step protocol's answer -> score, or extract
-> entail) enters the window while the rest of the step is still being judged. With `stop_when_failed_at_most` set
(official retry rounds) a unit is asked, accepted or re-asked as a whole (the official scripts re-ask an item whose
any per-object reply was rejected), and `rounds.RetryRounds` drops afterwards what the official rounds would not
have reached. Verdict rows are built into Arrow chunks as they finish, each full chunk written to the cell's spool
(an unnamed temporary file: a big cell's finished rows wait on disk, not in memory, while the rest is judged), and
ordered at the end: first-step rows in input order, later steps by caption/item/step/sub_index/trial, so the table
never depends on completion order.
"""

from __future__ import annotations

import mmap
import operator
import tempfile
from collections import deque
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine.memory import RELEASE_ROWS, release_unused_memory
from capeval.engine.protocols.base import (REQUEST_ORDER, REQUESTS_WITH_CONTEXT, JudgeProtocol, JudgingPolicy,
                                          RequestContext)
from capeval.engine.reasoning import DEFAULT_TAGS, empty_answer_reason, reasoning_tokens, split_reasoning
from capeval.engine.schemas import NO_VERDICT, VERDICTS, ParseStatus, conform, utf8_text

from .requests import attempt_key, to_judge_request
from .rounds import NOT_ASKED, RetryRounds, apply_drops, group_of, small_groups
from .summary import JudgingSummary
from .transcribe import Transcriber
from .transcribe import attempt as attempt_record

_SLICE = 2048
_ID_COLUMNS = ("request_key", "protocol", "task", "item_id", "video_id", "captioner", "prompt_id", "frame_spec",
               "step", "sub_index", "seed", "trial")
_HIDDEN = [pa.field("_depth", pa.int16()), pa.field("_order", pa.int64()), pa.field("_caption_key", pa.string())]
_ROW_SCHEMA = pa.schema([f.with_nullable(True) for f in VERDICTS])
_IDS = operator.itemgetter(*_ID_COLUMNS)
_OUTCOME_COLUMNS = ("judge", "raw_output", "verdict", "parse_status", "detail", "error", "prompt_tokens",
                    "cached_prompt_tokens", "completion_tokens", "latency_s", "attempt", "reasoning_tokens")
# The order of the per-row tuples in Cell._final; table() puts the columns in VERDICTS order.
_SINK_SCHEMA = pa.schema([_ROW_SCHEMA.field(n) for n in (*_ID_COLUMNS, *_OUTCOME_COLUMNS)] + _HIDDEN)
assert set(_SINK_SCHEMA.names) == set(VERDICTS.names) | {f.name for f in _HIDDEN}
_OK = (ParseStatus.OK, ParseStatus.REPAIRED)
_REQUEST_ORDER = [("_caption_key", "ascending"), ("item_id", "ascending"), ("step", "ascending"),
                  ("sub_index", "ascending"), ("trial", "ascending")]
assert [c for c, _ in _REQUEST_ORDER[1:]] == [c for c, _ in REQUEST_ORDER[1:]]  # the protocols' table order
_STREAMED_FIRST_ORDER = _REQUEST_ORDER + [("_order", "ascending")]
_LATER_ORDER = [("_depth", "ascending")] + _REQUEST_ORDER + [("_order", "ascending")]


class Row:
    __slots__ = ("cell", "req", "ctx", "depth", "order", "unit", "attempt", "key", "outcome", "final", "attempts",
                 "n_images")

    def __init__(self, cell: "Cell", req: dict, depth: int, order: int):
        self.cell, self.req, self.depth, self.order = cell, req, depth, order
        self.ctx = RequestContext.decode(req.get("context"))
        self.unit: Unit | None = None
        self.attempt = 0
        self.key = req["request_key"]
        self.outcome: dict | None = None  # verdict fields of the latest answer (unit rounds: until the unit decides)
        self.final = False
        self.attempts: list | None = None  # transcript records of its asks (when the cell keeps transcripts)
        self.n_images: int | None = None  # images its request showed, once built

    def judge_request(self):
        request = to_judge_request(self.req, attempt=self.attempt, ctx=self.ctx,
                                   reask_temperature=self.cell.policy.reask_temperature)
        self.n_images = len(request.images)
        return request


class Unit:
    __slots__ = ("key", "rows", "open", "sealed")

    def __init__(self, key: tuple):
        self.key, self.rows, self.open, self.sealed = key, [], 0, False


class Cell:
    """See the module docstring. `loop` provides enqueue(rows, front) and the judge's identity."""

    CHUNK_ROWS = 8192  # finished verdict rows per chunk; a cell with more writes its full chunks to its spool

    def __init__(self, requests: pa.Table, protocol: JudgeProtocol, policy: JudgingPolicy, *, judge_name: str,
                 judge_revision: str, keep_intermediate: bool = False, max_steps: int = 8, summary=None,
                 on_complete: Callable[["Cell", pa.Table], None] | None = None, name: str = "",
                 sealed: bool = True, part_order: str = "request", transcripts=None):
        self.protocol, self.policy, self.name = protocol, policy, name
        self.judge_name, self.judge_revision = judge_name, judge_revision
        self.keep_intermediate, self.max_steps = keep_intermediate, max_steps
        self.summary = summary if summary is not None else JudgingSummary()
        self.on_complete = on_complete
        # `transcripts`: a sink (engine/store/transcripts.py) receiving one transcript row per request row
        self.transcriber = Transcriber(transcripts, judge_name) if transcripts is not None else None
        self.intermediate = frozenset(getattr(protocol, "intermediate_steps", ()) or ())
        self.multi_step = type(protocol).next_requests is not JudgeProtocol.next_requests
        self.unit_rounds = policy.stop_when_failed_at_most is not None
        self.track_units = self.multi_step or self.unit_rounds
        self.rounds = RetryRounds(policy.stop_when_failed_at_most) if self.unit_rounds else None
        self.retry_errors = policy.mode == "official"  # official scripts re-ask on API failures too
        # official runs (groups) of at most K items: the official script makes no judge call for them, nor does
        # this cell (known when the cell is sealed before any row is pulled: group -> number of items)
        self.not_asked: dict[tuple, int] = {}
        # Parts: request tables still to be sent. A cell built from one table is sealed at once; a streamed cell
        # (a sweep cell whose captions are still being made) gets parts with `extend` until `seal`.
        self._parts: deque[pa.Table] = deque()
        self.n_requests = 0  # first-step rows received so far
        self.sealed = False
        # How the verdict rows of a cell received in parts are ordered: "request" (as one protocol-built table of
        # all the parts would be: a sweep cell whose parts came as captions were made) or "input" (the parts
        # one after the other: a request table streamed from a file)
        if part_order not in ("request", "input"):
            raise ValueError(f"part_order must be 'request' or 'input'; got {part_order!r}")
        self.multi_part = not sealed and part_order == "request"
        self._next_order = 0  # first-step order across parts
        self._rows_iter: Iterator[tuple[int, dict]] | None = None
        self._lookahead: tuple[int, dict] | None = None
        self._part_ended = False
        self.loop = None  # set by the loop
        self.extend(requests)
        if sealed:
            self.seal()
        self.exhausted = False  # sealed and every part's rows pulled
        self.open = 0  # rows admitted, not yet final
        self.units: dict[tuple, Unit] = {}
        self._block: tuple | None = None
        self._block_units: list[Unit] = []
        self._seq = 0  # production order of later-step rows
        self._records: list[tuple] = []  # finished rows not yet in a chunk
        self._spool = None  # (temporary file, Arrow IPC stream writer) of the full chunks, from the first one
        self.n_rows = 0
        self.done = False

    # -- source ---------------------------------------------------------------------------------------------------
    def extend(self, requests: pa.Table | Callable[[], pa.Table]) -> None:
        """One more part of the cell's first-step requests (e.g. the rows of the videos just captioned). A part must
        hold whole items: every row of an (item, caption) is in one part. A function instead of a table is a part
        built when the cell reaches it, so a big cell holds one part's requests at a time, not all of them."""
        if self.sealed:
            raise ValueError(f"cell {self.name!r} is sealed: no more requests can be added")
        if callable(requests):
            self._parts.append(requests)
        elif requests.num_rows:
            self._parts.append(self._received(requests))

    def _received(self, requests: pa.Table) -> pa.Table:
        self.n_requests += requests.num_rows
        if self.loop is not None:
            self.loop.grew(requests.num_rows)
        return conform(requests, REQUESTS_WITH_CONTEXT)

    def seal(self) -> None:
        """No more parts will come: the cell completes once its rows are final."""
        self.sealed = True
        if self.unit_rounds and self._next_order == 0:  # every first-step row is here, none sent yet
            self._parts = deque(self._received(p()) if callable(p) else p for p in self._parts)
            self.not_asked = small_groups(list(self._parts), self.policy.stop_when_failed_at_most)

    def _iter_part(self, t: pa.Table) -> Iterator[tuple[int, dict]]:
        base, self._next_order = self._next_order, self._next_order + t.num_rows
        order = None
        if self.track_units and t.num_rows:  # units must be contiguous: stable sort by (caption_key, item_id)
            idx = pc.sort_indices(t, [("caption_key", "ascending"), ("item_id", "ascending")])
            if not np.array_equal(idx.to_numpy(), np.arange(t.num_rows)):
                order = idx
        for start in range(0, t.num_rows, _SLICE):
            if order is None:
                part, ids = t.slice(start, _SLICE), range(base + start, base + min(start + _SLICE, t.num_rows))
            else:
                sel = order.slice(start, _SLICE)
                part, ids = t.take(sel), [base + i for i in sel.to_pylist()]
            yield from zip(ids, part.to_pylist())

    def head_caption(self) -> str | None:
        """caption_key of the next first-step row (None when no row is available now: the parts received so far
        are used up; `exhausted` says whether more can come)."""
        while self._lookahead is None:
            if self._rows_iter is not None:
                nxt = next(self._rows_iter, None)
                if nxt is not None:
                    self._lookahead = nxt
                    break
                self._rows_iter = None
                self._part_ended = True
            if not self._parts:
                return None
            part = self._parts.popleft()
            if callable(part):
                part = self._received(part())
            self._rows_iter = self._iter_part(part)  # the part is dropped once iterated
        return self._lookahead[1].get("caption_key") or ""

    def pull(self, n: int, until_caption: str | None = None) -> list[Row]:
        """Up to about n rows to send: first-step rows (rows without a caption are finished here, never sent) and
        whatever finishing them releases. With `until_caption`, stop before a row whose caption_key sorts after it
        (the scheduler merges cells in caption order)."""
        out: list[Row] = []
        for _ in range(n):
            head = self.head_caption()
            if self._part_ended:  # a part holds whole items: its last block is complete
                self._part_ended = False
                out += self._seal_block()
            if head is None:
                break
            if until_caption is not None and head > until_caption:
                break
            (order, req), self._lookahead = self._lookahead, None
            row = Row(self, req, 0, order)
            self.open += 1
            self.summary.steps[req["step"] or ""] = self.summary.steps.get(req["step"] or "", 0) + 1
            if self.track_units:
                block = (req["caption_key"], req["item_id"])
                if block != self._block:
                    out += self._seal_block()
                    self._block = block
                self._attach(row, sealed=False)
            out += self._admit(row)
        if self.head_caption() is None:
            self._part_ended = False
            out += self._seal_block()
            self.exhausted = self.sealed
        return out

    @property
    def queued_parts(self) -> int:
        """Parts received and not started yet (the one being sent is not counted)."""
        return len(self._parts)

    @property
    def waiting(self) -> bool:
        """Unsealed with nothing to send now: more parts are expected."""
        return not self.sealed and self._lookahead is None and not self._parts and self._rows_iter is None

    def _attach(self, row: Row, sealed: bool) -> None:
        r = row.req
        # task too: a benchmark may reuse item ids across tasks (action items on the event videos), still separate items
        key = (r["item_id"], r["task"], r["caption_key"], r["trial"], row.depth)
        unit = self.units.get(key)
        if unit is None:
            unit = self.units[key] = Unit(key)
            if not sealed:
                self._block_units.append(unit)
        unit.sealed = unit.sealed or sealed
        unit.rows.append(row)
        unit.open += 1
        row.unit = unit

    def _seal_block(self) -> list[Row]:
        units, self._block_units = self._block_units, []
        out: list[Row] = []
        for unit in units:
            unit.sealed = True
            if unit.open == 0:
                out += self._unit_answered(unit)
        return out

    def _admit(self, row: Row) -> list[Row]:
        """[row] to ask it, or what finishing it without asking releases (no caption, an upstream step failed)."""
        missing = row.ctx.missing
        if not missing and self.not_asked and row.depth == 0:
            n = self.not_asked.get(group_of(row.req))
            if n is not None:
                return self._final(row, {"verdict": NO_VERDICT, "parse_status": int(ParseStatus.FAILED),
                                         "error": NOT_ASKED.format(n=n, k=self.policy.stop_when_failed_at_most),
                                         "attempt": None})
        if not missing:
            return [row]
        if row.depth == 0 and self.loop is not None:
            self.loop.finished_unasked(1)
        status = row.ctx.parse.get("upstream_status", int(ParseStatus.MISSING))
        return self._final(row, {"verdict": NO_VERDICT, "parse_status": int(status), "error": missing,
                                 "attempt": None})

    # -- answers --------------------------------------------------------------------------------------------------
    def answer(self, row: Row, answer, source: str = "sent") -> list[Row]:
        """An answer (CachedResponse) or a backend error (str) for the row's current attempt; returns rows to ask
        (re-asks, next steps). `source`: where the answer came from (engine/store/transcripts.py)."""
        if isinstance(answer, str):
            outcome = {"verdict": NO_VERDICT, "parse_status": int(ParseStatus.ERROR), "error": utf8_text(answer)}
            retry = self.retry_errors
        else:
            # A thinking model's reasoning is never parsed as its answer (engine/reasoning.py); raw_output keeps it.
            tags = self.loop.reasoning_tags if self.loop is not None else DEFAULT_TAGS
            visible, reasoning = split_reasoning(answer.text, tags)
            try:  # a stored reply must never make a run impossible: whatever breaks here fails this row only
                code, status, detail = self.protocol.parse(row.req, visible)
            except Exception as exc:  # noqa: BLE001
                code, status, detail = NO_VERDICT, ParseStatus.FAILED, f"reply unreadable: {type(exc).__name__}: {exc}"
            if reasoning is not None and not visible and status == ParseStatus.FAILED:
                detail = f"{empty_answer_reason(answer.text, tags)} ({detail})" if detail else \
                    empty_answer_reason(answer.text, tags)
            detail = utf8_text(detail)  # surrogates decoded from JSON escapes cannot be written as UTF-8
            if row.attempt and status == ParseStatus.OK:
                status = ParseStatus.REPAIRED  # parsed only after a re-ask
            failed = status == ParseStatus.FAILED
            outcome = {"raw_output": answer.text, "verdict": int(code), "parse_status": int(status),
                       "detail": None if failed else detail, "error": detail if failed else None,
                       "prompt_tokens": answer.prompt_tokens, "cached_prompt_tokens": answer.cached_prompt_tokens,
                       "completion_tokens": answer.completion_tokens, "latency_s": answer.latency_s,
                       "reasoning_tokens": reasoning_tokens(reasoning, visible, answer.completion_tokens,
                                                            getattr(answer, "reasoning_tokens", None))}
            retry = failed
        outcome["attempt"] = row.attempt
        if self.transcriber is not None:
            rec = attempt_record(row, answer, source, outcome, self.policy.reask_temperature)
            row.attempts = [*(row.attempts or ()), rec]
        if self.unit_rounds:
            row.outcome = outcome
            row.unit.open -= 1
            if row.unit.open == 0 and row.unit.sealed:
                return self._unit_answered(row.unit)
            return []
        if retry and row.attempt < self.policy.max_reasks:
            self._reask(row)
            return [row]
        return self._final(row, outcome)

    def _reask(self, row: Row) -> None:
        row.attempt += 1
        row.key = attempt_key(row.req["request_key"], row.attempt, self.policy.reask_temperature)
        self.summary.reasks += 1

    def _unit_answered(self, unit: Unit) -> list[Row]:
        """Every row of the unit is final, or (unit rounds) answered at the unit's current attempt."""
        asked = [r for r in unit.rows if not r.final]
        if not self.unit_rounds or not asked:
            return self._unit_complete(unit)
        if any(r.outcome["parse_status"] not in _OK for r in asked):
            if asked[0].attempt < self.policy.max_reasks:  # the whole item again, as an official round does
                for r in asked:
                    self._reask(r)
                unit.open = len(asked)
                return asked
            for r in asked:  # never accepted: parsed replies of a rejected item carry no verdict either
                if r.outcome["parse_status"] in _OK:
                    r.outcome = {**r.outcome, "verdict": NO_VERDICT, "parse_status": int(ParseStatus.FAILED),
                                 "detail": None, "error": "another reply of this item was rejected (official rule: "
                                                          "an item is kept only when every reply passes)"}
            accepted = None
        else:
            accepted = asked[0].attempt
        self.rounds.add(group_of(asked[0].req), accepted, [(r.depth, r.order) for r in asked])
        unit.open = len(asked)  # each _final counts one down; the last completes the unit
        out: list[Row] = []
        for r in asked:
            out += self._final(r, r.outcome)
        return out

    def _final(self, row: Row, fields: dict) -> list[Row]:
        req = row.req
        status = fields["parse_status"]
        s = self.summary
        s.parse_failures += status == ParseStatus.FAILED
        s.repaired += status == ParseStatus.REPAIRED
        s.errors += status == ParseStatus.ERROR
        s.missing += status == ParseStatus.MISSING
        self.open -= 1
        row.final = True
        if self.transcriber is not None:
            self.transcriber.add(row, fields)
        if self.keep_intermediate or req["step"] not in self.intermediate:
            # one tuple per row, in _SINK_SCHEMA order; columns are made by transposing a chunk at once
            g = fields.get
            self._records.append(_IDS(req) + (
                self.judge_name, g("raw_output"), fields["verdict"], status, g("detail"), g("error"),
                g("prompt_tokens"), g("cached_prompt_tokens"), g("completion_tokens"), g("latency_s"), g("attempt"),
                g("reasoning_tokens"), row.depth, row.order, req["caption_key"]))
            if len(self._records) >= self.CHUNK_ROWS:
                self._flush_chunk()
        unit = row.unit
        if unit is None:
            return []
        row.outcome = {**dict(zip(_ID_COLUMNS, _IDS(req))), "judge": self.judge_name, **fields}
        unit.open -= 1
        if unit.open == 0 and unit.sealed:
            return self._unit_complete(unit)
        return []

    def _unit_complete(self, unit: Unit) -> list[Row]:
        if self.units.pop(unit.key, None) is None:
            return []  # completed already
        depth = unit.key[-1]
        if not self.multi_step or depth + 1 >= self.max_steps:
            return []
        reqs = pa.Table.from_pylist([r.req for r in unit.rows], schema=REQUESTS_WITH_CONTEXT)
        verdicts = pa.Table.from_pylist([r.outcome for r in unit.rows], schema=_ROW_SCHEMA)
        nxt = self.protocol.next_requests(reqs, verdicts, judge=self.judge_name, judge_revision=self.judge_revision)
        if not nxt.num_rows:
            return []
        rows = []
        for req in conform(nxt, REQUESTS_WITH_CONTEXT).to_pylist():
            self._seq += 1
            row = Row(self, req, depth + 1, self._seq)
            self.open += 1
            self.summary.steps[req["step"] or ""] = self.summary.steps.get(req["step"] or "", 0) + 1
            self._attach(row, sealed=True)
            rows.append(row)
        out: list[Row] = []
        for row in rows:
            out += self._admit(row)
        return out

    # -- the verdict table ----------------------------------------------------------------------------------------
    def _flush_chunk(self) -> None:
        if not self._records:
            return
        if self._spool is None:
            file = tempfile.TemporaryFile(prefix="capeval-verdicts-")
            self._spool = (file, pa.ipc.new_stream(file, _SINK_SCHEMA))
        self._spool[1].write_table(self._chunk())

    def _chunk(self) -> pa.Table:
        """The finished rows not yet in a chunk, as one (the records list starts again)."""
        columns = zip(*self._records) if self._records else [[] for _ in _SINK_SCHEMA]
        chunk = pa.table([pa.array(c, f.type) for c, f in zip(columns, _SINK_SCHEMA)], schema=_SINK_SCHEMA)
        self.n_rows += len(self._records)
        self._records = []
        return chunk

    def _spooled(self) -> tuple[list[pa.Table], _MappedSpool | None]:
        """The chunks written to the spool, read in place from a mapping of its file (no copy yet; the file goes
        with the mapping)."""
        if self._spool is None:
            return [], None
        file, writer = self._spool
        self._spool = None
        with file:
            writer.close()
            file.flush()
            mapped = _MappedSpool(file)
        return [pa.ipc.open_stream(mapped.buffer).read_all()], mapped

    def _verdict_order(self, t: pa.Table) -> pa.Array | None:
        """Positions of `t`'s rows in verdict order; None when they are in it."""
        if not t.num_rows:
            return None
        depth = t["_depth"].to_numpy()
        if self.multi_part:
            # Parts arrived in the order their captions were made; protocols sort a request table by REQUEST_ORDER,
            # so sorting by it (ties: the order within a part, whose items never span parts) gives the rows in the
            # order one table built from all the captions would have had.
            return _order_of(t, depth, _STREAMED_FIRST_ORDER)
        if not depth.any():
            first = t["_order"].to_numpy()
            return pa.array(np.argsort(first, kind="stable")) if (np.diff(first) < 0).any() else None
        return _order_of(t, depth, [("_order", "ascending")])

    def table(self) -> pa.Table:
        """The cell's VERDICTS table (call once every row is final)."""
        spooled, mapped = self._spooled()
        t = pa.concat_tables([*spooled, self._chunk()])
        del spooled
        dropped = self.rounds.dropped() if self.rounds is not None else None
        if dropped:
            t = apply_drops(t, dropped)
        if self.transcriber is not None:  # the same corrections in the transcripts' final outcome
            self.transcriber.finish((lambda tx: apply_drops(tx, dropped)) if dropped else None)
        # One copy at most: the rows out of order taken, or the spooled ones copied out of the spool's mapping
        order = self._verdict_order(t)
        t = t.select(VERDICTS.names)
        if order is not None or mapped is not None:
            # A column at a time: each taken (or, in order, copied out of the spool's mapping) and the unordered
            # column let go; the mapping's pages are handed back after each, so a big cell's rows exist about
            # once while they are put in order, not twice (_take_releasing)
            if t.num_rows >= RELEASE_ROWS:  # what the judging freed goes back before the copy
                release_unused_memory()
            schema, columns = t.schema, t.columns
            del t
            t = pa.Table.from_arrays(_take_releasing(columns, order, mapped), schema=schema)
        if mapped is not None:
            mapped.close()
        return conform(t, VERDICTS)


class _MappedSpool:
    """A cell's spool file mapped read-only: Arrow reads its chunks in place, and `drop_pages` hands the pages read
    so far back (they count in the process's resident memory while mapped; the page cache keeps them, and a later
    read maps them again). Why not read the file into memory: the chunks read that way share one buffer per chunk,
    so no column's memory goes until every column of the chunk has been put in order: two copies at the peak."""

    def __init__(self, file):
        self._map = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        self.buffer = pa.py_buffer(self._map)

    def drop_pages(self) -> None:
        if hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        """Unmapped when nothing reads from it any more (the table returned holds copies only)."""
        self.buffer = None
        try:
            self._map.close()
        except BufferError:  # a view of it is still alive somewhere: the mapping goes with it
            self.drop_pages()


def _take_releasing(columns: list, indices: pa.Array | None, mapped: _MappedSpool | None = None) -> list:
    """Each of `columns` taken at `indices` (copied, in their chunks, when None), in place, a column at a time: the
    list's reference to a column is dropped as it is taken, so a big cell's verdict rows exist about once while they
    are put in order, not twice (when the list holds the columns' only references); the pages of `mapped` the
    column was read from go back after each."""
    for i in range(len(columns)):
        column, columns[i] = columns[i], None
        if indices is not None:
            columns[i] = column.take(indices)
        else:
            columns[i] = pa.chunked_array([pa.concat_arrays([chunk]) for chunk in column.chunks], column.type)
        del column
        if mapped is not None:
            mapped.drop_pages()
    return columns


def _order_of(t: pa.Table, depth: np.ndarray, first_order: list) -> pa.Array:
    """Row positions of `t` in verdict order: first-step rows (depth 0) sorted by `first_order`, then later-step rows
    by _LATER_ORDER. Sorted on the key columns alone, so the table itself is copied once (by the caller's take),
    not filtered, sorted and concatenated (three copies of a big cell's rows at once)."""
    out = []
    for rows, keys in ((np.flatnonzero(depth == 0), first_order), (np.flatnonzero(depth > 0), _LATER_ORDER)):
        if not len(rows):
            continue
        if len(rows) == t.num_rows:  # one kind of row only: sorted in place, no copy of the key columns
            out.append(pc.sort_indices(t.select([c for c, _ in keys]), keys))
            continue
        at = pa.array(rows, pa.int64())
        sub = t.select([c for c, _ in keys]).take(at)
        out.append(pc.take(at, pc.sort_indices(sub, keys)))
    return pa.concat_arrays(out) if len(out) > 1 else out[0]

