"""OpenAIJudge.stream (bounded window over a RequestFeed), 401/403 as BackendFatalError, prefix-cache usage."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from capeval.adapters.base import BackendFatalError, JudgeRequest, StreamingJudge
from capeval.adapters.openai_http import OpenAIJudge
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer


class ListFeed:
    """A simple RequestFeed: requests become ready when put; closed once nothing is ready or outstanding. Thread-safe:
    the backend takes from its own thread while the consumer puts follow-ups."""

    def __init__(self, requests=()):
        self.lock = threading.Lock()
        self.ready = list(requests)
        self.outstanding = 0
        self.taken_sizes = []

    def put(self, r):
        with self.lock:
            self.ready.append(r)

    def take(self, n):
        with self.lock:
            out, self.ready = self.ready[:n], self.ready[n:]
            self.outstanding += len(out)
            self.taken_sizes.append(len(out))
            return out

    def done(self, n=1):
        with self.lock:
            self.outstanding -= n

    @property
    def closed(self):
        with self.lock:
            return not self.ready and self.outstanding == 0


def _reqs(n, tag="s"):
    return [JudgeRequest(key=f"{tag}{i}", user=f"{tag} question {i}", seed=i) for i in range(n)]


def test_stream_bounded_window_with_follow_ups():
    """Responses arrive in completion order, never more than the window in flight, follow-up requests added during
    the stream (what re-asks and next steps do) are sent, and every request is answered exactly once."""
    faults = FaultConfig(latency_median_s=0.02, latency_sigma=0.8, seed=3)
    with LoopbackServer(faults) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=64) as judge:
            assert isinstance(judge, StreamingJudge)
            feed = ListFeed(_reqs(150))
            seen = []
            for resp in judge.stream(feed, max_in_flight=12):
                seen.append(resp)
                assert resp.error is None, resp.error
                if resp.key.startswith("s") and int(resp.key[1:]) % 10 == 0:  # a second step for every 10th
                    feed.put(JudgeRequest(key="f" + resp.key, user="follow-up " + resp.key))
                feed.done()
        stats = server.stats()
    keys = [r.key for r in seen]
    assert Counter(keys) == Counter([f"s{i}" for i in range(150)] + [f"fs{i}" for i in range(0, 150, 10)])
    by_key = {r.key: r for r in seen}
    assert by_key["s7"].text == "echo:s question 7"
    assert by_key["fs20"].text == "echo:follow-up s20"
    assert 8 <= stats["max_in_flight"] <= 12  # the window was used, and never exceeded
    assert max(feed.taken_sizes) <= 12
    # completion order, not submission order: lognormal latencies reorder answers
    firsts = [int(k[1:]) for k in keys if k.startswith("s")]
    assert firsts != sorted(firsts)


def test_stream_waits_for_an_open_feed_and_reports_invalid_requests():
    """A feed that is open but empty is polled until it gets work from another thread; a request whose body cannot
    be built comes back as an error response without being sent."""
    with LoopbackServer() as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="openai") as judge:
            feed = ListFeed()
            feed.outstanding = 1  # held open by the producer below

            def producer():
                feed.put(JudgeRequest(key="late", user="late question"))
                feed.put(JudgeRequest(key="bad", user="q", json_schema="{not json"))
                feed.done()

            threading.Timer(0.2, producer).start()
            out = []
            for r in judge.stream(feed, 4):
                out.append(r)
                feed.done()
    assert {r.key: r.text for r in out} == {"late": "echo:late question", "bad": None}
    assert "invalid request" in next(r.error for r in out if r.key == "bad")


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failure_is_fatal_after_one_request(status):
    """A wrong key: batch and stream raise BackendFatalError with one clear line; the server saw one request, the
    GET /models that asks whether the key is accepted, and no chat request."""
    cfg = FaultConfig(api_key="right-key", status_for_bad_key=status)
    with LoopbackServer(cfg) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, api_key="wrong-key", structured="none",
                         max_in_flight=32) as judge:
            with pytest.raises(BackendFatalError, match=f"HTTP {status}") as err:
                judge.judge(_reqs(200, "b"))
            assert "\n" not in str(err.value) and "API key" in str(err.value)
            with pytest.raises(BackendFatalError):
                list(judge.stream(ListFeed(_reqs(200, "t")), 32))
        stats = server.stats()
        assert (stats["model_lists"], stats["requests"]) == (1, 0)  # the probe; nothing else was sent
        with OpenAIJudge(model="m", base_url=server.base_url, api_key="right-key", structured="none") as judge:
            assert all(r.error is None for r in judge.judge(_reqs(20, "ok")))


def test_cached_prompt_tokens_read_from_usage():
    """Against a server that simulates a prefix cache, requests sharing a long prefix report cached tokens."""
    caption = "Caption: a red car drives past a bakery while two people cross the road at dusk. " * 6
    reqs = [JudgeRequest(key=f"q{i}", system="Judge the caption.", user=f"{caption}\nQuestion {i}: is it dusk?")
            for i in range(20)]
    with LoopbackServer(FaultConfig(cache_mode="prefix")) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=1) as judge:
            out = judge.judge(reqs)
    assert out[0].cached_prompt_tokens == 0
    assert all(0.7 < o.cached_prompt_tokens / o.prompt_tokens < 1 for o in out[1:])


def test_stream_with_the_judge_loops_window_feed():
    """The feed the judge loop uses (engine/judging/window.py WindowFeed): done() after each answer, a re-ask put
    before done(), the stream ends when the feed closes."""
    from capeval.engine.judging.window import WindowFeed

    feed = WindowFeed()
    for r in _reqs(40, "w"):
        feed.put(r)
    with LoopbackServer(FaultConfig(latency_median_s=0.005, latency_sigma=0.5)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=16) as judge:
            keys = []
            for resp in judge.stream(feed, 8):
                keys.append(resp.key)
                if resp.key == "w3":
                    feed.put(JudgeRequest(key="w3-again", user="re-ask w3"))
                feed.done()
        # the backend refills its window from its own thread as each answer comes, before the loop handed the answer
        # back (done()): the feed's count of requests taken may pass the window for a moment, the server's never does
        assert server.stats()["max_in_flight"] <= 8
    assert sorted(keys) == sorted([f"w{i}" for i in range(40)] + ["w3-again"])
    assert feed.closed


def test_the_window_is_refilled_while_the_consumer_is_busy():
    """The backend takes new requests from the feed on its own thread as each answer frees a slot: while the
    consumer is busy with one answer (the judge loop topping up), the other slots keep being refilled and answered,
    and the server still never sees more than the window."""
    from capeval.engine.judging.window import WindowFeed

    feed = WindowFeed()
    for r in _reqs(120, "busy"):
        feed.put(r)
    with LoopbackServer(FaultConfig(latency_median_s=0.005, latency_sigma=0.3)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=8, hedge=0) as judge:
            keys, sent_while_busy = [], None
            for resp in judge.stream(feed, 8):
                keys.append(resp.key)
                if sent_while_busy is None:
                    time.sleep(1.0)  # busy with the first answer, which is not handed back yet
                    sent_while_busy = server.stats()["requests"]
                feed.done()
        stats = server.stats()
    assert sorted(keys) == sorted(r.key for r in _reqs(120, "busy"))
    assert sent_while_busy >= 60, sent_while_busy  # taking only between answers it would have sent 8 or 9
    assert stats["max_in_flight"] <= 8 and stats["requests"] == 120
    assert feed.closed


def test_closing_the_stream_early_cancels_its_calls_and_takes_no_more():
    from capeval.engine.judging.window import WindowFeed

    feed = WindowFeed()
    for r in _reqs(60, "early"):
        feed.put(r)
    with LoopbackServer(FaultConfig(latency_median_s=0.3, latency_sigma=0.2)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=8, hedge=0) as judge:
            stream = judge.stream(feed, 8)
            first = next(stream)
            stream.close()
            left = feed.ready
            deadline = time.monotonic() + 5
            while server.stats()["in_flight"] and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
            assert server.stats()["in_flight"] == 0  # the calls in flight were cancelled
            assert feed.ready == left  # and nothing more was taken
    assert first.error is None and left < 60


def test_a_consumer_slower_than_the_server_holds_the_window_and_a_bounded_number_of_answers(monkeypatch):
    """A window of 8 against a fast server, the consumer taking 20 ms an answer, ANSWERS_AHEAD set to 8: answers it
    has not handled yet count against the window beyond 8 of them, so requests taken and not yet handed back stay
    within 16 (without the bound the window refills as each answer lands and the backlog grows with the run: ~80
    of 100 here)."""
    from capeval.adapters import http_chat

    monkeypatch.setattr(http_chat._Window, "ANSWERS_AHEAD", 8)
    with LoopbackServer(FaultConfig(latency_median_s=0.001, latency_sigma=0.1, seed=5)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=8) as judge:
            feed = ListFeed(_reqs(100))
            outstanding, answered = [], []
            for resp in judge.stream(feed, max_in_flight=8):
                outstanding.append(feed.outstanding)
                answered.append(resp.key)
                time.sleep(0.02)
                feed.done()
        stats = server.stats()
    assert sorted(answered) == sorted(f"s{i}" for i in range(100))
    assert max(outstanding) <= 16, max(outstanding)
    assert stats["max_in_flight"] == 8  # the window is still used whole (at the start, the consumer keeps up)
