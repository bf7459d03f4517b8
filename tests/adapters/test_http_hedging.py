"""Tail hedging of the OpenAI-compatible backends (adapters/http_chat.py ChatRunner): once the caller has nothing more
to send, slots the drain frees carry copies of the longest-outstanding requests; the first good answer wins, the
other copies are cancelled, the server never sees more than the window, and the copies are counted."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import Counter

import pytest

from capeval.adapters.base import JudgeRequest, ListFeed
from capeval.adapters.http_chat import ChatRunner, Prices, RetryPolicy, encode_body
from capeval.adapters.openai_http import OpenAIJudge
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer


def _requests(n: int, tag: str) -> list[JudgeRequest]:
    return [JudgeRequest(key=f"{tag}-{i}", user=f"{tag} question {i}", max_tokens=8, seed=i) for i in range(n)]


@pytest.mark.parametrize("hedge", [0, 1, 3])
def test_hedge_copies_fill_only_the_slots_the_drain_leaves_idle(hedge):
    """Lognormal latency, window 8, 60 requests: every request is answered once with its own answer; the server
    never sees more than 8 at once; copies (the later arrivals of a question) arrive only after the last first
    copy went out, at most `hedge` per request, and each one is counted."""
    requests = _requests(60, "tail")
    with LoopbackServer(FaultConfig(latency_median_s=0.05, latency_sigma=0.8)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=8,
                         hedge=hedge) as judge:
            out = list(judge.stream(ListFeed(requests), 8))
            hedged = judge.hedged_requests
        stats = server.stats()
    assert sorted(o.key for o in out) == sorted(r.key for r in requests)
    by_key = {r.key: r for r in requests}
    assert all(o.error is None and o.text and by_key[o.key].user in o.text for o in out)
    assert stats["max_in_flight"] <= 8
    arrivals = sorted(stats["attempts"], key=lambda a: a[1])
    seen, copies = set(), []
    for question, at, _ in arrivals:
        if question in seen:
            copies.append((question, at))
        seen.add(question)
    # a copy whose request was answered before the copy went out never reaches the server
    assert len(copies) == len(arrivals) - len(requests) <= hedged
    last_first = max(at for question, at, _ in arrivals if (question, at) not in set(copies))
    assert all(at >= last_first for _, at in copies)  # no copy while requests still waited to be sent
    assert max(Counter(q for q, _ in copies).values(), default=0) <= hedge
    if hedge:
        assert copies  # the drain of 8 lognormal requests always leaves slots idle
    else:
        assert hedged == 0


@pytest.mark.parametrize("temperature", [None, 0.7])
def test_sampled_requests_are_never_copied(temperature):
    """The drain of the test above, with requests that send no temperature (the server's default) or 0.7: their
    copies would be different draws, the first answered favouring short replies, so none is sent."""
    requests = [JudgeRequest(key=r.key, user=r.user, max_tokens=8, seed=r.seed, temperature=temperature)
                for r in _requests(60, "sampled")]
    with LoopbackServer(FaultConfig(latency_median_s=0.05, latency_sigma=0.8)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=8, hedge=3) as judge:
            out = list(judge.stream(ListFeed(requests), 8))
            hedged = judge.hedged_requests
        stats = server.stats()
    assert sorted(o.key for o in out) == sorted(r.key for r in requests) and all(o.error is None for o in out)
    assert hedged == 0 and len(stats["attempts"]) == len(requests)


def _first_attempt_stalls(question: str, attempt: int) -> bool:
    return question.startswith("stall") and attempt == 1


async def _stalling_app(record: dict, stalls):
    from aiohttp import web

    async def chat(request):
        body = await request.json()
        question = body["messages"][-1]["content"]
        record["attempts"][question] += 1
        record["in_flight"] += 1
        record["peak"] = max(record["peak"], record["in_flight"])
        try:
            if stalls(question, record["attempts"][question]):
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:  # the client hung up (handler_cancellation)
                    record["cancelled"].append(question)
                    raise
            return web.json_response({"choices": [{"message": {"content": f"echo:{question}"},
                                                    "finish_reason": "stop"}],
                                      "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
        finally:
            record["in_flight"] -= 1

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


class _StallServer:
    """A chat server whose requests stall (until the client hangs up) where `stalls(question, attempt)` says so and
    answer at once otherwise; records attempts, cancellations and the peak in flight."""

    def __init__(self, stalls=_first_attempt_stalls):
        self.stalls = stalls
        self.record = {"attempts": Counter(), "cancelled": [], "in_flight": 0, "peak": 0}
        self._ready = threading.Event()

    def __enter__(self):
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def _main(self):
        from aiohttp import web

        self._loop = asyncio.new_event_loop()

        async def serve():
            runner = web.AppRunner(await _stalling_app(self.record, self.stalls), handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()

        self._loop.run_until_complete(serve())

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}/v1"


def test_the_first_answer_wins_and_the_other_copy_is_cancelled():
    """After a window of quick answers (hedging waits for them: a latency to go by), two requests whose first copies
    stall: their hedge copies answer at once, so the answers come from the copies, long before any timeout, and the
    stalled copies are cancelled (the server sees the client hang up)."""
    requests = _requests(4, "quick") + _requests(2, "stall")
    with _StallServer() as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=4, hedge=1,
                         timeout_s=30.0, connect_timeout_s=1.0) as judge:
            t0 = time.monotonic()
            out = list(judge.stream(ListFeed(requests), 4))
            elapsed = time.monotonic() - t0
            won, hedged = judge.hedges_won, judge.hedged_requests
        deadline = time.monotonic() + 5
        while len(server.record["cancelled"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert {o.key: o.text for o in out} == {r.key: f"echo:{r.user}" for r in requests}
    assert elapsed < 10 and hedged == won == 2
    assert sorted(server.record["cancelled"]) == sorted(r.user for r in requests[4:])
    assert server.record["peak"] <= 4


def _body(question: str) -> bytes:
    return encode_body({"model": "m", "messages": [{"role": "user", "content": question}], "temperature": 0})


def test_a_request_asked_for_later_takes_its_slot_back_from_a_hedge_copy():
    """Window 2, after two quick answers: a request that never answers ("x") and its hedge copy fill it; a request
    submitted then ("y") is sent at once (the hedge copy gives its slot up) and answered, and the server never holds
    more than 2."""
    with _StallServer(stalls=lambda question, attempt: question == "x") as server:
        runner = ChatRunner(server.base_url, "EMPTY", max_in_flight=2, retry=RetryPolicy(timeout_s=30.0, connect_timeout_s=0.5),
                            prices=Prices(), max_hedges=1)
        try:
            sink: queue.SimpleQueue = queue.SimpleQueue()
            assert [r.text for r in runner.run([(_body("w1"), None), (_body("w2"), None)])] == ["echo:w1", "echo:w2"]
            runner.submit([("x", _body("x"), None)], sink)
            runner.hedge_idle_slots()
            deadline = time.monotonic() + 5
            while server.record["attempts"]["x"] < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert runner.hedged_requests == 1 and server.record["attempts"]["x"] == 2  # both slots hold "x"
            t0 = time.monotonic()
            runner.submit([("y", _body("y"), None)], sink)
            token, result = runner.wait(sink)
            waited = time.monotonic() - t0
            assert (token, result.text) == ("y", "echo:y") and waited < 5, waited
        finally:
            runner.close()
    assert server.record["peak"] <= 2
    assert server.record["cancelled"][:1] == ["x"]  # the hedge copy of "x" gave its slot up


def test_hedge_option_is_checked():
    with pytest.raises(ValueError, match="hedge"):
        OpenAIJudge(model="m", base_url="http://127.0.0.1:9/v1", hedge=-1)


class _LoopFeed:
    """Like the judge loop's feed: `closed` only once every answer was handed back (an answer may bring a follow-up),
    `draining` (when `says_draining`) once every request was taken."""

    def __init__(self, requests, says_draining: bool):
        self.requests, self.pos = list(requests), 0
        self.handed_back, self.says_draining = 0, says_draining

    def take(self, n):
        out = self.requests[self.pos : self.pos + n]
        self.pos += len(out)
        return out

    @property
    def closed(self):
        return self.pos >= len(self.requests) and self.handed_back == len(self.requests)

    @property
    def draining(self):
        return self.says_draining and self.pos >= len(self.requests)


@pytest.mark.parametrize("says_draining", [True, False])
def test_a_feed_that_stays_open_until_its_answers_are_back_hedges_only_when_it_says_draining(says_draining):
    requests = _requests(60, "loop")
    with LoopbackServer(FaultConfig(latency_median_s=0.05, latency_sigma=0.8)) as server:
        with OpenAIJudge(model="m", base_url=server.base_url, structured="none", max_in_flight=8) as judge:
            feed = _LoopFeed(requests, says_draining)
            out = []
            for response in judge.stream(feed, 8):
                out.append(response)
                feed.handed_back += 1
        copies = len(server.stats()["attempts"]) - len(requests)
    assert sorted(o.key for o in out) == sorted(r.key for r in requests) and all(o.error is None for o in out)
    assert (copies > 0) == says_draining
