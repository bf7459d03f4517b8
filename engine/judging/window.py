"""The in-flight window between the judge loop and a backend, and the group committer of answers.

`WindowFeed` is the `capeval.adapters.base.RequestFeed` the loop fills and a backend pulls from. `batch_stream` turns a
backend that only has `judge(batch)` into a stream: small batches, one after another (or several at once from a
thread pool when the judge says `thread_safe = True`), yielding each batch's responses as soon as it returns, so
there is no barrier across the whole window. `Committer` writes answers to the judgment cache from its own thread in
small group commits, so an answer is on disk within ~`interval_s` of arriving whatever the backend does next (a
kill -9 loses at most what is in flight plus that interval).

`judge_window` is how many requests the loop keeps at a backend: the judge's own `max_in_flight` (its option; each
backend's default is chosen for it, docs/judges.md "How many requests in flight"), never silently lowered.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Iterator

from capeval.adapters.base import BackendFatalError, JudgeRequest, JudgeResponse, judge_capabilities
from capeval.engine.errors import UsageError
from capeval.engine.store.judgment_cache import CachedResponse, JudgmentCache

#: the window for a judge that declares none (in-process judges that answer batches: local, replay)
DEFAULT_WINDOW = 64


def judge_window(judge, asked: int | None = None) -> int:
    """Requests the judge loop keeps in flight at `judge`: `asked` when the caller sets a window (`capeval construct
    --max-in-flight`), else the judge's own `max_in_flight`, else DEFAULT_WINDOW. A window larger than the judge
    takes (its connection pool, its option) is a UsageError naming the option, never silently lowered."""
    declared = judge_capabilities(judge).max_in_flight
    if asked is None:
        return declared or DEFAULT_WINDOW
    if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
        raise UsageError(f"max_in_flight must be an integer >= 1, got {asked!r}")
    if declared is not None and asked > declared:
        raise UsageError(f"judge {getattr(judge, 'name', '?')}: a window of {asked} requests in flight was asked, "
                         f"but the judge takes at most {declared} (its max_in_flight option): set its "
                         f"max_in_flight to {asked} (e.g. --judge-option max_in_flight={asked}, or params = "
                         f"{{ max_in_flight = {asked} }} in the sweep's [[judges]])")
    return asked


class WindowFeed:
    """Thread-safe queue of requests ready to send. `closed` is True when nothing is ready and every request taken
    has been handed back to the loop (`done`): the loop adds re-asks and next steps before calling `done`, so a
    backend that sees `closed` with nothing in flight can end its stream. `stop()` ends the stream early.
    `draining` (capeval.adapters.base.RequestFeed) is set by the loop once its rows are all sent: only follow-ups of
    the answers in flight can come, so a backend may hedge the slots the drain leaves idle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: deque[JudgeRequest] = deque()
        self._taken = 0  # taken by the backend, not yet handed back through done()
        self._stopped = False
        self.draining = False

    def put(self, request: JudgeRequest) -> None:
        with self._lock:
            self._ready.append(request)

    def take(self, n: int) -> list[JudgeRequest]:
        with self._lock:
            if self._stopped:
                return []
            k = min(int(n), len(self._ready))
            out = [self._ready.popleft() for _ in range(k)]
            self._taken += k
            return out

    def done(self, n: int = 1) -> None:
        with self._lock:
            self._taken = max(0, self._taken - n)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True

    def reopen(self) -> None:
        with self._lock:
            self._stopped, self._taken, self.draining = False, 0, False

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._stopped or (not self._ready and self._taken == 0)

    @property
    def ready(self) -> int:
        return len(self._ready)

    @property
    def in_flight(self) -> int:
        return self._taken


def _call(judge, batch: list[JudgeRequest]) -> list[JudgeResponse]:
    try:
        responses = judge.judge(batch)
        if len(responses) != len(batch):
            raise RuntimeError(f"judge returned {len(responses)} responses for {len(batch)} requests")
        return responses
    except BackendFatalError:
        raise
    except Exception as exc:  # noqa: BLE001 - a failed batch becomes per-request errors; the run goes on
        return [JudgeResponse(r.key, None, error=f"{type(exc).__name__}: {exc}") for r in batch]


def batch_stream(judge, feed: WindowFeed, max_in_flight: int, batch_size: int) -> Iterator[JudgeResponse]:
    """Stream over `judge.judge(batch)`. Batches of at most `batch_size`; with `judge.thread_safe` true, up to
    max_in_flight // batch_size batches run at once (threads), else one at a time. A BackendFatalError stops taking
    work; the batches already running finish and are yielded, then it is raised."""
    batch_size = max(1, min(int(batch_size), int(max_in_flight)))
    workers = max(1, int(max_in_flight) // batch_size) if judge_capabilities(judge).thread_safe else 1
    if workers == 1:
        while True:
            batch = feed.take(batch_size)
            if not batch:
                if feed.closed:
                    return
                time.sleep(0.002)  # the loop is still handing back the last answers (threaded backends only)
                continue
            yield from _call(judge, batch)
    fatal: BaseException | None = None
    with ThreadPoolExecutor(workers, thread_name_prefix="capeval-judge") as pool:
        running: dict = {}
        while True:
            while fatal is None and len(running) < workers:
                room = max_in_flight - sum(len(b) for b in running.values())
                batch = feed.take(min(batch_size, room)) if room > 0 else []
                if not batch:
                    break
                running[pool.submit(_call, judge, batch)] = batch
            if not running:
                if fatal is not None:
                    raise fatal
                if feed.closed:
                    return
                time.sleep(0.002)
                continue
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                batch = running.pop(fut)
                try:
                    responses = fut.result()
                except BackendFatalError as exc:
                    fatal = exc
                    feed.stop()
                    responses = [JudgeResponse(r.key, None, error=f"{type(exc).__name__}: {exc}") for r in batch]
                yield from responses


class CacheWriteError(RuntimeError):
    def __init__(self, path: Path, what: str, exc: BaseException):
        super().__init__(f"judgment cache {path}: could not write {what}: {exc}")
        self.path, self.what = path, what


class Committer:
    """Writes answers (and releases failed keys' claims) to the judgment cache from a background thread, in one
    transaction per group; `flush()` waits until everything handed over is on disk. A write error (disk full, a
    read-only cache) is kept and raised by the next `check()`/`flush()`: nothing is half-written (each group is one
    transaction) and no later group is attempted."""

    def __init__(self, cache_dir: str | Path, *, interval_s: float = 0.05, group: int = 256):
        self._cache = JudgmentCache(cache_dir)
        self.path = self._cache.path
        self.interval_s, self.group = interval_s, group
        self._cond = threading.Condition()
        self._answers: list[CachedResponse] = []
        self._release: list[str] = []
        self._busy = False
        self._closing = False
        self._flush_asked = False
        self.error: CacheWriteError | None = None
        self.written = 0
        self._thread = threading.Thread(target=self._run, name="capeval-cache-commit", daemon=True)
        self._thread.start()

    def put(self, answer: CachedResponse) -> None:
        with self._cond:
            self._answers.append(answer)
            if len(self._answers) >= self.group:
                self._cond.notify()

    def release(self, key: str) -> None:
        with self._cond:
            self._release.append(key)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._closing and not self._flush_asked and len(self._answers) < self.group:
                    self._cond.wait(self.interval_s)  # gather a group; put() wakes us at `group` answers
                self._flush_asked = False
                answers, release = self._answers, self._release
                self._answers, self._release = [], []
                closing = self._closing
                self._busy = bool(answers or release)
            if answers or release:
                if self.error is None:
                    try:
                        self._cache.put_many(answers, release)
                        self.written += len(answers)
                    except Exception as exc:  # noqa: BLE001 - kept and raised by check(): never lost silently
                        self.error = CacheWriteError(self.path, f"{len(answers)} judgments", exc)
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            elif closing:
                return

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def flush(self) -> None:
        with self._cond:
            self._flush_asked = True
            self._cond.notify()
            while (self._answers or self._release or self._busy) and self._thread.is_alive():
                self._cond.wait(0.05)
        self.check()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify()
            self._thread.join(timeout=60)
            self._cache.close()
