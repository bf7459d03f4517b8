"""What a client with no overhead of its own could reach: a closed-loop model of a bounded window over a server with
lognormal latency, with and without tail hedging.

`bound = window / mean latency` (the scale section's and the caption section's bound) holds only while the window is
full. A run of N requests also has a drain: once the last request is sent, the window empties as the slowest of the
last ~window requests come back, and with a heavy tail (σ 0.8: the 99th percentile is 6.4× the median) that drain is
long. This model replays the run with zero client and server overhead: every slot is refilled the instant it comes
free, latencies are drawn from the server's own distribution, and with `hedge` > 0 the drain's free slots carry
copies of the longest-outstanding requests once they are older than the median, after a window of answers
(adapters/http_chat.py `ChatRunner`: fewest copies first, at most `hedge` per request, first answer wins, the other
copies give their slots back). Its
share is therefore the most any client can reach on that run, and `share / model share` is the part the client
itself loses. Deterministic for a seed; the result is the mean over `seeds`.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics

_ANSWER, _WAKE = 0, 1


def model_wall_s(n: int, window: int, median_s: float, sigma: float, *, hedge: int = 0, seed: int = 0) -> float:
    """Wall time of `n` requests through a `window`-wide client with no overhead (module docstring)."""
    rng = random.Random(seed)

    def latency() -> float:
        return median_s * math.exp(sigma * rng.gauss(0.0, 1.0))

    events: list[tuple[float, int, int, int]] = []  # (time, order, kind, call)
    order = 0
    started: list[float] = []
    live = [0] * n  # copies of each call still holding a slot
    copies = [0] * n  # copies sent of each call
    done = [False] * n
    used = 0  # slots held by live copies
    sent = 0
    outstanding: set[int] = set()
    answered = 0
    wake_at = None

    def send(call: int, now: float) -> None:
        nonlocal order, used
        heapq.heappush(events, (now + latency(), order, _ANSWER, call))
        order += 1
        live[call] += 1
        copies[call] += 1
        used += 1

    def top_up(now: float) -> None:
        nonlocal sent, order, wake_at
        while used < window and sent < n:
            started.append(now)
            outstanding.add(sent)
            send(sent, now)
            sent += 1
        if sent < n or hedge <= 0 or answered < window:  # the runner hedges after a window of answers
            return
        while used < window:
            open_calls = [c for c in outstanding if copies[c] - 1 < hedge]
            if not open_calls:
                return
            call = min(open_calls, key=lambda c: (copies[c], started[c]))
            at = started[call] + median_s
            if now < at:  # look again when it is old enough (the runner's hedge timer)
                if wake_at is None or at < wake_at:
                    wake_at = at
                    heapq.heappush(events, (at, order, _WAKE, -1))
                    order += 1
                return
            send(call, now)

    top_up(0.0)
    now = 0.0
    while outstanding:
        now, _, kind, call = heapq.heappop(events)
        if kind == _WAKE:
            if wake_at is not None and now >= wake_at:
                wake_at = None
            top_up(now)
            continue
        if done[call]:  # a cancelled copy: its slot was given back when its call was answered
            continue
        done[call] = True
        answered += 1
        outstanding.discard(call)
        used -= live[call]  # this copy and every other copy of the call
        live[call] = 0
        top_up(now)
    return now


def model_share(n: int, window: int, median_s: float, sigma: float, *, hedge: int = 0,
                seeds: tuple[int, ...] = (0, 1, 2)) -> dict:
    """The model's share of the bound (`window` / mean latency), mean and range over `seeds`."""
    bound = window / (median_s * math.exp(sigma**2 / 2))
    shares = [n / model_wall_s(n, window, median_s, sigma, hedge=hedge, seed=s) / bound for s in seeds]
    return {"share": round(statistics.fmean(shares), 3), "min": round(min(shares), 3), "max": round(max(shares), 3),
            "hedge": hedge, "seeds": len(seeds)}
