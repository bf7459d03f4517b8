"""Progress for the sweep stages (decode, caption, judge): counts, throughput, ETA and retries on stderr.

On a terminal a tqdm bar; elsewhere (`capeval submit` logs, a redirected run) one plain line every
`CAPEVAL_PROGRESS_EVERY_S` seconds (default 30) and a last one at the end, so logs show progress without a bar's
carriage returns. `--no-progress` turns both off. Updated by the driver as Ray tasks and actor calls finish, so they
move also when the work runs on actors.

The judge loop adds what went wrong so far (`set_counts`: retries by kind, failed requests; engine/judging/live.py),
possibly from the HTTP client's thread while no answer comes back: the plain line is then printed from there too, at
the same pace, so a run that is only retrying still shows it. `warn` prints a line above a terminal bar.

Rate and ETA are measured from the first finished unit on (warm-up: model load, the first request's latency and the
first decode are not work the rest will repeat), so a slow start does not make the ETA hours long. Model loading is
announced apart with `note` (engine/stages/caption.py prints how long it took).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from capeval.engine.safetext import TerminalStream, for_terminal


def note(text: str, enabled: bool = True) -> None:
    """One line on stderr (model loading and other phases that are not counted work)."""
    if enabled:
        print(for_terminal(text), file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60:02d}:{rest % 60:02d}"


class Bar:
    def __init__(self, total: int, desc: str, unit: str, enabled: bool, *, stream=None, every_s: float | None = None,
                 growing: bool = False):
        """`growing`: the total is not known yet and grows with `grow(n)` (the judge loop's requests)."""
        self.bar = None
        self.total, self.desc, self.unit = int(total or 0), desc, unit
        self.stream = stream if stream is not None else sys.stderr
        self.n = self.retries = 0
        self.counts = ""  # what went wrong so far (set_counts), shown after the retries
        self._lock = threading.Lock()  # set_counts may come from another thread
        self.t_first: float | None = None  # when the first unit finished: rate and ETA count from here
        self.n_first = 0
        self.plain = False
        self.every_s = float(every_s if every_s is not None else os.environ.get("CAPEVAL_PROGRESS_EVERY_S", 30))
        self._last_line = time.monotonic()
        if not (enabled and (self.total or growing)):
            return
        if _is_terminal(self.stream):
            from tqdm import tqdm

            # tqdm moves the cursor with escape sequences (one bar above another, a warning above the bars), which a
            # TerminalStream would print escaped: the bar writes to the stream under it, and the only untrusted text
            # in it (the description's labels, the counts' reasons) is escaped here
            self.bar_stream = self.stream.wrapped if isinstance(self.stream, TerminalStream) else self.stream
            self.bar = tqdm(total=self.total, desc=for_terminal(desc), unit=unit, file=self.bar_stream,
                            dynamic_ncols=True, smoothing=0.1, mininterval=0.5)
        else:
            self.plain = True

    # -- what the driver reports ------------------------------------------------------------------------------------
    def update(self, n: int) -> None:
        if not n:
            return
        now = time.monotonic()
        self.n += n
        if self.t_first is None:  # warm-up over: rate and ETA count from here
            self.t_first, self.n_first = now, self.n
            if self.bar is not None:
                self.bar.reset(total=self.total)  # restarts tqdm's clock and its smoothed rate
                self.bar.initial = self.bar.n = self.bar.last_print_n = self.n
                self.bar.refresh()
            return
        if self.bar is not None:
            self.bar.update(n)
        elif self.plain and now - self._last_line >= self.every_s:
            self._line(now)

    def grow(self, n: int) -> None:
        if not n:
            return
        self.total += int(n)
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def set_retries(self, n: int) -> None:
        self.retries = int(n)
        if self.bar is not None:
            self.bar.set_postfix_str(f"retries={self.retries}", refresh=False)

    def set_counts(self, text: str) -> None:
        """What went wrong so far (e.g. `retries 12 (429: 5, 5xx: 7), failed 3/80 (3.8%)`); any thread."""
        if text == self.counts:
            return
        self.counts = text
        if self.bar is not None:
            self.bar.set_postfix_str(for_terminal(text), refresh=True)
        elif self.plain and time.monotonic() - self._last_line >= self.every_s:
            self._line(time.monotonic())

    def warn(self, text: str) -> None:
        """A warning line: above a terminal bar, or between the plain lines."""
        if self.bar is not None:
            self.bar.write(for_terminal(text), file=self.bar_stream)
        else:
            with self._lock:
                print(for_terminal(text), file=self.stream, flush=True)

    # -- figures --------------------------------------------------------------------------------------------------
    def rate(self, now: float | None = None) -> float | None:
        """Units per second since the first finished unit (None before the second)."""
        if self.t_first is None or self.n <= self.n_first:
            return None
        elapsed = (now or time.monotonic()) - self.t_first
        return (self.n - self.n_first) / elapsed if elapsed > 0 else None

    def line(self, now: float | None = None) -> str:
        """The plain progress line: `desc: n/total unit (pct), rate, ETA, retries`."""
        now = now or time.monotonic()
        pct = f" ({100.0 * self.n / self.total:.0f}%)" if self.total else ""
        rate = self.rate(now)
        parts = [f"{self.desc}: {self.n}/{self.total} {self.unit}{pct}"]
        if rate:
            parts.append(f"{rate:.2f} {self.unit}/s")
            if self.total:
                parts.append(f"ETA {_clock((self.total - self.n) / rate)}")
        else:
            parts.append("warming up")
        if self.retries:
            parts.append(f"retries {self.retries}")
        if self.counts:
            parts.append(self.counts)
        return ", ".join(parts)

    def _line(self, now: float) -> None:
        with self._lock:
            self._last_line = now
            print(for_terminal(self.line(now)), file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.plain:
            self.plain = False
            self._line(time.monotonic())

    def __enter__(self) -> "Bar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
