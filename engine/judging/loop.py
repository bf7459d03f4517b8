"""The streaming judge loop: cells' rows -> cache check + claim -> a bounded in-flight window -> answers.

One `JudgeLoop` per judge. It keeps up to `max_in_flight` requests at the backend (the judge's own `max_in_flight`
unless the caller asks for a window: window.judge_window) (`stream(feed, max_in_flight)` when
the backend has it, else `window.batch_stream` over `judge(batch)`), topping the window up after every answer with,
first, the re-asks and next-step requests that answer released (they share the caption that is being judged, which
keeps the prefix cache warm), then new rows in caption order. Before a key is sent it is re-checked in the judgment
cache and claimed there (capeval.engine.store.judgment_cache: a key another live process claimed is waited for, never sent
twice); rows sharing a key share one request. Answers go to the cache through `window.Committer` (group commits from
a background thread), so a kill -9 loses at most the window.

Replies are stored as valid UTF-8 (capeval.engine.schemas.utf8_text: a backend may hand over lone surrogates decoded from
JSON escapes). A reply longer than `max_reply_chars` (default MAX_REPLY_CHARS, 1,000,000 characters: far beyond any
verdict, scene list or event list a protocol asks for; a judge object may set its own `max_reply_chars`) is neither
parsed nor cached: its row fails as a judge error whose reason says "reply too large" (retryable, like any judge
error: a rerun asks again), so a rambling judge never fills the cache with megabytes.

Stops: a `BackendFatalError` (401/403) ends the run after the requests in flight, with everything finished committed,
as `capeval.engine.errors.AbortedError`; so does a cache that cannot be written (disk full, read-only), naming the path.
"""

from __future__ import annotations

import sqlite3
import time
from collections import deque
from pathlib import Path

from capeval.adapters.base import BackendFatalError, JudgeResponse, judge_capabilities
from capeval.engine.errors import AbortedError
from capeval.engine.reasoning import tags_of
from capeval.engine.schemas import utf8_text
from capeval.engine.secrets import redact_message
from capeval.engine.store.judgment_cache import CachedResponse, JudgmentCache

from .cells import Cell, Row
from .live import WARN_FAILURE_SHARE, LiveCounts
from .window import CacheWriteError, Committer, WindowFeed, batch_stream, judge_window
from capeval.engine.stages.progress import Bar

_POLL_S = 0.2  # how often keys claimed by another process are looked up again
MAX_REPLY_CHARS = 1_000_000  # see the module docstring


class BackendError(str):
    """A backend's error text (what `Cell.answer` gets for a failed request), with the raw replies the backend
    refused (`replies`, per attempt) for the transcript."""

    replies: tuple[str, ...]

    def __new__(cls, text: str, replies: tuple[str, ...] = ()):
        obj = super().__new__(cls, text)
        obj.replies = replies
        return obj


class JudgeLoop:
    def __init__(self, judge, cache_dir, *, max_in_flight: int | None = None, batch_size: int = 64, use_cache: bool = True,
                 progress: bool = False, claim_timeout_s: float | None = None, max_reply_chars: int | None = None,
                 warn_failure_share: float | None = WARN_FAILURE_SHARE):
        self.judge = judge
        self.capabilities = caps = judge_capabilities(judge)
        limit = max_reply_chars if max_reply_chars is not None else caps.max_reply_chars
        self.max_reply_chars = int(limit) if isinstance(limit, int) and limit > 0 else MAX_REPLY_CHARS
        # stripped from each reply before the protocol parses it (cells.Cell.answer); the cache keeps the raw reply,
        # so other tags re-parse cached replies without asking again
        self.reasoning_tags = tags_of(judge)
        self.max_in_flight = judge_window(judge, max_in_flight)
        # A batch judge (adapters/batch_rounds.py) answers whole rounds: the window is a round, gathered whole while
        # a source still adds cells (`_gathering`), and its batches' state lives beside the judgment cache.
        self.round_requests = caps.round_requests
        self.max_in_flight = max(self.max_in_flight, self.round_requests)
        if caps.round_requests:
            judge.use_state_dir(Path(cache_dir) / "batches")
        self.batch_size = max(1, int(batch_size))
        self.use_cache = use_cache
        self.cells: list[Cell] = []
        self._pending: deque[Row] = deque()  # rows to check/claim, then send
        self._waiters: dict[str, list[Row]] = {}  # key -> rows waiting for its answer (ready, in flight, held)
        self._held: dict[str, float] = {}  # keys another live process claimed -> when we last looked
        self._next_poll = 0.0
        self._cached_run = 1  # rows to claim at once: grows while every key is found in the cache
        self._claim_slice = min(64, max(1, self.max_in_flight // 8))  # see _top_up
        self._fresh: dict[str, CachedResponse] = {}  # answers of this run the committer may not have written yet
        self.feed = WindowFeed()
        # Optional producer of cells (JudgeScheduler.run(source=...)): poll(timeout) adds cells and parts as their
        # inputs appear (a sweep's captions); `open` is true while it may add more.
        self.source = None
        self.streaming = caps.streaming
        try:
            self.cache = JudgmentCache(cache_dir, claim_timeout_s=claim_timeout_s)
            self.committer = Committer(cache_dir)
        except sqlite3.Error as exc:
            raise AbortedError(f"judgment cache {cache_dir}: cannot open for writing: {exc}") from None
        self._bar = None
        if progress:  # rate and ETA from the first answer on: a judge model's loading is not counted as work
            self._bar = Bar(0, f"judge {getattr(judge, 'name', '')}", "req", True, growing=True)
        # retries, rate limits and failures as they happen: on the bar, and a warning past warn_failure_share
        self.live = LiveCounts(getattr(judge, "name", ""), bar=self._bar, warn_share=warn_failure_share)
        if caps.reports_retries:  # HTTP judges tell each retry (adapters/http_chat.py)
            judge.watch_retries(self.live.retried)

    def add(self, cell: Cell) -> None:
        cell.loop = self
        self.cells.append(cell)
        self.grew(cell.n_requests)

    def grew(self, n: int) -> None:
        """n more first-step rows to judge (a cell added, or a part of a streamed cell)."""
        if self._bar is not None:
            self._bar.grow(n)

    def finished_unasked(self, n: int) -> None:
        """n first-step rows finished without asking (no caption): done, as far as the progress line goes."""
        if self._bar is not None:
            self._bar.update(n)

    # -- main loop --------------------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while True:
                self._top_up()
                if self.feed.ready and not self._gathering():
                    self._session()
                    continue
                if self._held:
                    self.committer.flush()
                    time.sleep(_POLL_S)
                    self._poll_held(force=True)
                    continue
                if self._pending:
                    continue
                for c in self.cells:  # nothing left to ask: these are complete
                    if not c.done and c.exhausted and c.open == 0:
                        self._complete(c)
                more = self.source is not None and self.source.open
                if all(c.done for c in self.cells) and not more:
                    break
                if more or any(c.waiting for c in self.cells if not c.done):
                    # Cells still coming (captions being made): keep what came back durable, then wait for them.
                    if self.source is None:
                        raise RuntimeError("judge loop: unsealed cells and no source to complete them")
                    self.committer.flush()
                    self.source.poll(_POLL_S)
                    continue
                if not any(not c.exhausted for c in self.cells if not c.done):
                    stuck = [(c.name, c.open) for c in self.cells if not c.done]
                    raise RuntimeError(f"judge loop: rows neither pending nor in flight: {stuck}")
            self.committer.flush()
        except CacheWriteError as exc:
            raise AbortedError(f"{exc}; the run stopped, every earlier answer is kept") from None
        finally:
            self.close()

    def _gathering(self) -> bool:
        """A batch judge's round waits until it fills the window or no more cells can come (captions being made)."""
        return bool(self.round_requests and self.source is not None and self.source.open
                    and self.feed.ready < self.max_in_flight)

    def _session(self) -> None:
        """Stream until the feed closes (nothing ready, nothing in flight)."""
        self.feed.reopen()
        stream = (self.judge.stream(self.feed, self.max_in_flight) if self.streaming
                  else batch_stream(self.judge, self.feed, self.max_in_flight, self.batch_size))
        fatal = None
        try:
            for resp in stream:
                self._on_response(resp)
                self.feed.done()
                if fatal is None:
                    self._top_up()
                self.committer.check()
        except BackendFatalError as exc:
            fatal = exc
        finally:
            close = getattr(stream, "close", None)
            if close:
                close()
        if fatal is not None:
            self.committer.flush()
            done = self.committer.written
            raise AbortedError(f"judge {getattr(self.judge, 'name', '?')} refused the run ({fatal}); stopped after "
                               f"the requests in flight, {done} answers of this run are in the cache at "
                               f"{self.cache.path}; fix the credentials and rerun to ask the rest") from None

    # -- filling the window -----------------------------------------------------------------------------------------
    def _top_up(self) -> None:
        if self.source is not None:
            self.source.poll(0)  # cells and parts that became ready (cheap when nothing changed)
        target = self.max_in_flight
        # While the backend is busy, wait until a slice of the window is free before claiming: each claim is one
        # cache transaction, so claiming a key per answer would cost a transaction per request at a wide window.
        low = target - (self._claim_slice if self.feed.in_flight else 0)
        if self.feed.ready < low:
            self._fill(target)
        if self._held and time.monotonic() >= self._next_poll:
            self._poll_held()
        self._complete_finished()
        if not self.feed.draining and self.feed.in_flight and self._all_sent():
            self.feed.draining = True

    def _all_sent(self) -> bool:
        """Every row of every cell is sent or answered and no more cells can come: what is left are the answers in
        flight and their follow-ups (re-asks, next steps)."""
        return (not self._pending and not self._held and not (self.source is not None and self.source.open)
                and all(c.exhausted or c.done for c in self.cells))

    def _fill(self, target: int) -> None:
        while self.feed.ready < target:
            if not self._pending:
                if not self._pull(max(256, target)):
                    break
                self._complete_finished()
                continue
            # Claim only what the window needs now (re-asks and next steps queued later still go out first), but
            # grow the chunk while rows keep coming from the cache (a rerun: few transactions, nothing to send).
            n = min(len(self._pending), max(target - self.feed.ready, self._cached_run))
            self._dispatch([self._pending.popleft() for _ in range(n)])

    def _pull(self, n: int) -> bool:
        """New first-step rows into the queue: from the cell whose next caption sorts first (so cells judged
        together go caption by caption, each caption's requests adjacent); False when every cell is used up."""
        live, pulled = [], False
        for c in self.cells:
            if c.exhausted or c.done:
                continue
            if c.head_caption() is None:  # a streamed cell between parts: finish its last block, maybe seal it
                rows = c.pull(0)
                pulled = pulled or bool(rows)
                self._enqueue(rows)
            else:
                live.append(c)
        if not live:
            return pulled
        if len(live) == 1:
            self._enqueue(live[0].pull(n))
            return True
        heads = sorted(((c.head_caption(), i) for i, c in enumerate(live)), key=lambda h: (h[0] is None, h[0] or "", h[1]))
        first = live[heads[0][1]]
        bound = heads[1][0] if heads[0][0] is not None else None  # up to the next cell's first caption
        self._enqueue(first.pull(n, until_caption=bound))
        return True

    def _enqueue(self, rows: list[Row], front: bool = False) -> None:
        if front:
            self._pending.extendleft(reversed(rows))
        else:
            self._pending.extend(rows)

    def _dispatch(self, rows: list[Row]) -> None:
        new: list[str] = []
        fresh: list[str] = []
        for row in rows:
            waiting = self._waiters.get(row.key)
            if waiting is not None:
                waiting.append(row)
            else:
                self._waiters[row.key] = [row]
                (fresh if row.key in self._fresh else new).append(row.key)
        for k in fresh:  # answered in this run, maybe not committed yet: never ask again
            self._waiters[k][0].cell.summary.cached += 1
            self._resolve(k, self._fresh[k], "shared")
        if not new:
            return
        if not self.use_cache:
            for k in new:
                self._send(k)
            return
        res = self._claim(new)
        self._cached_run = min(1024, 2 * self._cached_run) if len(res.found) == len(new) else 1
        for k in res.claimed:
            self._send(k)
        for k in res.held:
            self._held[k] = time.monotonic()
        for k, cached in res.found.items():
            rows_ = self._waiters[k]
            rows_[0].cell.summary.cached += 1
            self._resolve(k, cached, "cache")

    def _claim(self, keys):
        try:
            return self.cache.claim(keys)
        except sqlite3.Error as exc:
            raise AbortedError(f"judgment cache {self.cache.path}: could not claim {len(keys)} keys before sending "
                               f"them: {exc}") from None

    def _send(self, key: str) -> None:
        row = self._waiters[key][0]
        try:
            request = row.judge_request()
        except Exception as exc:  # noqa: BLE001 - e.g. unreadable frames: this request fails, the run goes on
            self._release(key)
            self._resolve(key, f"{type(exc).__name__}: {exc}", "not sent")
            return
        self.feed.put(request)

    def _poll_held(self, force: bool = False) -> None:
        self._next_poll = time.monotonic() + _POLL_S
        keys = list(self._held)
        res = self._claim(keys)
        for k in res.claimed:
            del self._held[k]
            self._send(k)
        for k, cached in res.found.items():
            del self._held[k]
            self._waiters[k][0].cell.summary.cached += 1
            self._resolve(k, cached, "cache")

    # -- answers ----------------------------------------------------------------------------------------------------
    def _on_response(self, resp: JudgeResponse) -> None:
        rows = self._waiters.get(resp.key)
        if rows is None:
            return  # not ours (a backend answering twice): ignore
        s = rows[0].cell.summary
        s.sent += 1
        s.prompt_tokens += resp.prompt_tokens or 0
        s.cached_prompt_tokens += resp.cached_prompt_tokens or 0
        s.completion_tokens += resp.completion_tokens or 0
        failure = None
        if resp.text is None:
            # an error may quote the endpoint's URL, key and all (engine/secrets.py)
            failure = redact_message(resp.error) or "backend returned no text"
        elif len(resp.text) > self.max_reply_chars:
            failure = (f"reply too large: {len(resp.text):,} characters, over the size cap max_reply_chars "
                       f"{self.max_reply_chars:,}; not parsed, not cached")
        self.live.answered(failure is not None, failure, reask=rows[0].attempt > 0)
        if failure is not None:
            self._release(resp.key)  # a failed request is not ours any more: another run may ask it
            if resp.text is not None and self.capabilities.round_requests:
                self.judge.forget_answer(resp.key)  # a batch judge keeps answers: a refused one must not come back
            if resp.text is None:  # with what the server answered that the backend refused, for the transcript
                failure = BackendError(failure, tuple(utf8_text(r) for r in getattr(resp, "raw_replies", ()) or ()))
            self._resolve(resp.key, failure)
            return
        cr = CachedResponse(resp.key, self.judge.name, utf8_text(resp.text), resp.prompt_tokens or 0,
                            resp.cached_prompt_tokens or 0, resp.completion_tokens or 0,
                            float(resp.latency_s or 0.0), float(resp.cost_usd or 0.0),
                            getattr(resp, "reasoning_tokens", None))
        self.committer.put(cr)
        if len(self._fresh) >= 8192:  # everything older is committed after a flush: the cache answers it
            self.committer.flush()
            self._fresh.clear()
        self._fresh[resp.key] = cr
        self._resolve(resp.key, cr)

    def _release(self, key: str) -> None:
        if self.use_cache:
            self.committer.release(key)

    def _resolve(self, key: str, answer, source: str = "sent") -> None:
        rows = self._waiters.pop(key)
        follow: list[Row] = []
        for i, row in enumerate(rows):  # rows sharing a key: one request sent, the others reuse its answer
            follow += row.cell.answer(row, answer, "shared" if i and source == "sent" else source)
        if self._bar is not None:
            # the bar counts asks: every re-ask and next-step row asked because of this answer is one more to do,
            # so the total grows with them and the line never passes 100%
            self._bar.grow(len(follow))
            self._bar.update(len(rows))
        if follow:
            self._enqueue(follow, front=True)

    def _complete_finished(self) -> None:
        for c in self.cells:
            if not c.done and c.exhausted and c.open == 0:
                self._complete(c)

    def _complete(self, cell: Cell) -> None:
        cell.done = True
        if cell.on_complete is not None:
            self.committer.flush()  # a cell's verdicts never get ahead of its cached answers
            cell.on_complete(cell, cell.table())

    def close(self) -> None:
        try:
            self.committer.close()
        except CacheWriteError:
            pass  # raised already by run() (its flush); nothing more was written
        finally:
            try:  # our claims (answered keys' included): another process may take unanswered ones at once
                self.cache.release_all()
            except sqlite3.Error:
                pass
            self.cache.close()
            self.live.close()
            if self.capabilities.reports_retries:
                self.judge.watch_retries(None)  # the judge may serve another loop: its retries are not ours
            if self._bar is not None:
                self._bar.close()
