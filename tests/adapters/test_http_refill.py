"""The stream's window is refilled before its answers are handed on (adapters/http_chat.py ChatRunner.stream): the
slots a batch of answers freed carry the next requests while the caller is still handling that batch, so the server
does not wait on the caller's parsing and committing."""

from __future__ import annotations

import pytest

from capeval.adapters.base import JudgeRequest
from capeval.adapters.openai_http import OpenAIJudge
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer

WINDOW = 8


class _CountingFeed:
    """A feed that stays open until its answers are handed back (as the judge loop's), counting what was taken."""

    def __init__(self, requests):
        self.requests, self.taken, self.handed_back = requests, 0, 0
        self.draining = False

    def take(self, n):
        out = self.requests[self.taken : self.taken + n]
        self.taken += len(out)
        return out

    @property
    def closed(self):
        return self.taken >= len(self.requests) and self.handed_back == len(self.requests)


def test_the_slots_freed_by_answers_are_refilled_before_the_answers_are_handed_on():
    requests = [JudgeRequest(key=f"r{i}", user=f"refill question {i}", max_tokens=8, seed=i) for i in range(60)]
    with LoopbackServer(FaultConfig(latency_median_s=0.02, latency_sigma=0.5)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=WINDOW,
                         hedge=0) as judge:
            feed = _CountingFeed(requests)
            out, short = [], []
            for response in judge.stream(feed, WINDOW):
                out.append(response)
                # this answer's slot (and those of every answer before it) already carries a next request
                if feed.taken < min(len(requests), WINDOW + len(out)):
                    short.append((len(out), feed.taken))
                feed.handed_back += 1
        stats = server.stats()
    assert sorted(o.key for o in out) == sorted(r.key for r in requests) and all(o.error is None for o in out)
    assert short == []
    assert stats["max_in_flight"] <= WINDOW


def test_the_server_reports_its_time_weighted_mean_in_flight():
    """/stats: the request-seconds in flight over the span from the first arrival to the last departure, and their
    ratio (Little's law: what the client kept at the server)."""
    with LoopbackServer(FaultConfig(latency_s=0.2)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=4, hedge=0) as judge:
            out = judge.judge([JudgeRequest(key=f"k{i}", user=f"together {i}", max_tokens=8) for i in range(4)])
        stats = server.stats()
    assert all(o.error is None for o in out)
    assert stats["busy_span_s"] >= 0.2 and stats["in_flight_s"] >= 4 * 0.2
    assert stats["mean_in_flight"] == pytest.approx(stats["in_flight_s"] / stats["busy_span_s"], rel=1e-3)
    assert 1.0 < stats["mean_in_flight"] <= 4.0
    assert stats["last_change"] - stats["first_arrival"] == pytest.approx(stats["busy_span_s"], abs=1e-3)
