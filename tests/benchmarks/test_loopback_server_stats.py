"""The loopback server's /stats (benchmarks/loopback_server.py): the time-weighted mean of requests in flight, which
tells how full a client kept the server's window."""

from __future__ import annotations

import pytest

from capeval.adapters.base import JudgeRequest
from capeval.adapters.openai_http import OpenAIJudge
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer


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
