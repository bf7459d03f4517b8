"""Live accounting of one judge loop: retries, rate limits and failed requests, shown while they happen.

A judge that answers slowly because it is retrying 429s, or that fails one request in five, looked the same as a
healthy one until the run ended (~55 s of retries in a sweep were reported nowhere). `LiveCounts` keeps

* the retries the backend made, by kind ("429", "5xx", "timeout", "connection", "bad body", another status), as the
  HTTP client reports them (adapters/http_chat.py `ChatRunner.on_retry`, wired by `watch_retries` on the
  OpenAI-compatible backends) -- on the client's own thread, before the request has an answer;
* the requests that came back from the backend, and those that failed there after their retries (no text, or a
  reply too large to keep),

puts them on the judge's progress line (engine/stages/progress.py `Bar.set_counts`), and prints a warning line on
stderr when the failure share of the finished requests passes `warn_share` (the sweep's `[options]
warn_failure_share`, default 5%): once, after at least MIN_FINISHED requests finished, and again each time the share
has grown by a further 10 points, so a dying judge is reported as it dies, not once per request. A run with fewer
requests gets its warning at the end. Cached answers are not requests: they count in neither figure. Answers to
re-asks (an official policy asks a request the backend failed again) are counted apart, so one request asked ten
times reads as one request and nine re-asks, not as ten requests.
"""

from __future__ import annotations

import threading

from capeval.engine.stages.progress import note

#: the default `warn_failure_share`
WARN_FAILURE_SHARE = 0.05
#: finished requests before a share is worth a warning (1 failure of 2 is not a trend); the end warns regardless
MIN_FINISHED = 10
#: a further warning needs the share this much above the one last warned about
WARN_STEP = 0.10


class LiveCounts:
    def __init__(self, judge_name: str, *, bar=None, warn_share: float | None = WARN_FAILURE_SHARE, warn=None):
        """`bar`: a progress Bar (or None); `warn(text)`: prints a warning line (default: on the bar, or stderr)."""
        self.judge_name = judge_name
        self.bar = bar
        self.warn_share = warn_share
        self._warn = warn
        self.retries: dict[str, int] = {}
        self.finished = self.failed = 0
        self.reasks = 0  # of the finished answers, those to re-asks of a request already answered once
        self.first_error: str | None = None
        self.warned_share: float | None = None
        self._lock = threading.Lock()  # retries arrive on the HTTP client's thread

    # -- what the loop and the backend report ---------------------------------------------------------------------
    def retried(self, kind: str) -> None:
        """One retry of one request (called by the backend, on its thread)."""
        with self._lock:
            self.retries[str(kind)] = self.retries.get(str(kind), 0) + 1
        self._show()

    def answered(self, failed: bool, error: str | None = None, *, reask: bool = False) -> None:
        """One request came back from the backend; `failed`: without a usable reply after its retries (`error`
        says why); `reask`: it was a re-ask of a request answered before (a policy that asks a failed request again
        makes several answers of one request)."""
        self.finished += 1
        self.reasks += bool(reask)
        if failed:
            self.failed += 1
            if self.first_error is None:
                self.first_error = error or "no reply"
        self._show()
        if self.finished - self.reasks >= MIN_FINISHED:  # a trend needs distinct requests, not one asked 10 times
            self._maybe_warn()

    def close(self) -> None:
        """End of the loop: the warning a run too small for MIN_FINISHED did not get yet."""
        if self.warned_share is None:
            self._maybe_warn()

    # -- figures ----------------------------------------------------------------------------------------------------
    @property
    def n_retries(self) -> int:
        return sum(self.retries.values())

    def share(self) -> float:
        return self.failed / self.finished if self.finished else 0.0

    def text(self) -> str:
        """`retries 12 (429: 5, 5xx: 7), failed 3/80 (3.8%)`; empty while nothing went wrong."""
        parts = []
        with self._lock:
            retries = dict(self.retries)
        if retries:
            kinds = ", ".join(f"{k}: {n}" for k, n in sorted(retries.items(), key=lambda kv: (-kv[1], kv[0])))
            parts.append(f"retries {sum(retries.values())} ({kinds})")
        if self.failed:
            reasks = f"; {self.reasks} re-asks" if self.reasks else ""
            parts.append(f"failed {self.failed}/{self.finished} ({100 * self.share():.1f}%{reasks})")
        return ", ".join(parts)

    def _show(self) -> None:
        if self.bar is not None:
            self.bar.set_counts(self.text())

    def _maybe_warn(self) -> None:
        if self.warn_share is None or not self.failed:
            return
        share = self.share()
        if share <= self.warn_share:
            return
        if self.warned_share is not None and share < self.warned_share + WARN_STEP:
            return
        self.warned_share = share
        what, detail = f"{self.failed} of {self.finished} finished requests failed", ""
        if self.reasks:  # "10 of 10 requests" for one request asked 10 times would mislead: answers, and of what
            n_requests = self.finished - self.reasks
            what = f"{self.failed} of {self.finished} answers failed"
            detail = f"{n_requests} request{'s' if n_requests != 1 else ''} and {self.reasks} re-asks of failed ones, "
        self._say(f"warning: judge {self.judge_name}: {what} ({detail}{100 * share:.1f}%, above warn_failure_share "
                  f"{100 * self.warn_share:g}%); first error: {self.first_error}")

    def _say(self, text: str) -> None:
        if self._warn is not None:
            self._warn(text)
        elif self.bar is not None:
            self.bar.warn(text)
        else:
            note(text)
