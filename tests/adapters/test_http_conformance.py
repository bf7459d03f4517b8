"""HTTP conformance of the OpenAI-compatible client (adapters/http_chat.py over adapters/http_transport.py) against
real loopback servers written here on raw asyncio streams, so the test controls the framing byte by byte: bodies
delimited by closing the connection (HTTP/1.0 style and HTTP/1.1 `Connection: close`, no Content-Length), chunked
bodies, gzip, keep-alive across many requests, connections reset mid-reply (retried, then answered), and a server
that never answers one request (it fails retryably after its own timeout and holds no other request).

Every request goes through `OpenAIJudge`, the path a run takes; each reply echoes its request's question, so an
answer given to the wrong request would show."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import struct
import threading
import time
from collections import Counter

import pytest

from capeval.adapters.base import JudgeRequest, ListFeed
from capeval.adapters.openai_http import OpenAIJudge


class RawServer:
    """An HTTP server on 127.0.0.1 in its own thread and event loop; `reply(question, attempt)` -> a framing name
    (see `_answer`) chooses how each request is answered. Records connections and attempts per question."""

    def __init__(self, reply, idle_close_s: float | None = None):
        self.reply, self.idle_close_s = reply, idle_close_s  # idle_close_s: drop idle keep-alive connections
        self.connections = 0
        self.gets = 0
        self.attempts: Counter = Counter()
        self.arrived: dict[str, float] = {}  # question -> time.monotonic() of its first attempt
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def __enter__(self) -> "RawServer":
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _main(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:  # stalled replies and idle keep-alive connections
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_close_s)
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
                    return
                if head.startswith(b"GET "):  # the client's GET /models (whether the key is accepted): no such page
                    self.gets += 1
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                body = json.loads(await reader.readexactly(length))
                question = body["messages"][-1]["content"]
                self.attempts[question] += 1
                self.arrived.setdefault(question, time.monotonic())
                framing = self.reply(question, self.attempts[question])
                if not await _answer(writer, framing, _completion(question)):
                    return  # the framing ends the connection
        finally:
            writer.close()


def _completion(question: str) -> bytes:
    return json.dumps({"choices": [{"message": {"content": "echo:" + question}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()


async def _answer(writer: asyncio.StreamWriter, framing: str, body: bytes) -> bool:
    """Write one reply; True when the connection stays open for the next request."""
    ctype = b"Content-Type: application/json\r\n"
    if framing == "stall":  # accept the request, never answer it
        await asyncio.Event().wait()
    if framing == "slow":
        await asyncio.sleep(0.1)
        framing = "length"
    if framing == "http10_close":  # HTTP/1.0: the body ends where the connection ends
        writer.write(b"HTTP/1.0 200 OK\r\n" + ctype + b"\r\n" + body[:10])
        await writer.drain()
        await asyncio.sleep(0.01)  # the body arrives in two pieces
        writer.write(body[10:])
        await writer.drain()
        return False
    if framing == "http11_close":
        writer.write(b"HTTP/1.1 200 OK\r\n" + ctype + b"Connection: close\r\n\r\n" + body)
        await writer.drain()
        return False
    if framing == "chunked":
        parts = [body[i : i + 7] for i in range(0, len(body), 7)]
        writer.write(b"HTTP/1.1 200 OK\r\n" + ctype + b"Transfer-Encoding: chunked\r\n\r\n")
        for part in parts:
            writer.write(b"%x\r\n%s\r\n" % (len(part), part))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
    elif framing == "gzip":
        packed = gzip.compress(body)
        writer.write(b"HTTP/1.1 200 OK\r\n" + ctype + b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
                     % len(packed) + packed)
    elif framing == "reset":  # a promised body cut short by a TCP reset
        writer.write(b"HTTP/1.1 200 OK\r\n" + ctype + b"Content-Length: %d\r\n\r\n" % len(body) + body[:5])
        await writer.drain()
        await asyncio.sleep(0.01)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        return False
    else:  # "length": Content-Length, kept alive
        writer.write(b"HTTP/1.1 200 OK\r\n" + ctype + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    return True


def _requests(n: int, tag: str) -> list[JudgeRequest]:
    return [JudgeRequest(key=f"{tag}-{i}", user=f"{tag} question {i}", seed=i) for i in range(n)]


def _judge(server: RawServer, **options) -> OpenAIJudge:
    settings = {"model": "m", "base_url": server.base_url, "api_key": "EMPTY", "structured": "none",
                "max_in_flight": 8, "timeout_s": 10.0, "max_attempts": 3, "backoff_base_s": 0.01, **options}
    return OpenAIJudge(**settings)


def _assert_echoed(requests, out) -> None:
    assert [o.error for o in out] == [None] * len(requests)
    assert [o.text for o in out] == ["echo:" + r.user for r in requests]


@pytest.mark.parametrize("framing", ["http10_close", "http11_close", "chunked", "gzip", "length"])
def test_every_framing_of_a_valid_reply_is_read(framing):
    requests = _requests(12, framing)
    with RawServer(lambda question, attempt: framing) as server, _judge(server) as judge:
        out = judge.judge(requests)
    _assert_echoed(requests, out)
    assert set(server.attempts.values()) == {1}, server.attempts  # read the first time, never retried


def test_keep_alive_reuses_connections_across_many_requests():
    requests = _requests(300, "keep")
    # hedge=0: a hedge copy cancelled mid-reply closes its connection; this test counts keep-alive reuse
    with RawServer(lambda question, attempt: "length") as server, _judge(server, max_in_flight=4, hedge=0) as judge:
        out = list(judge.stream(ListFeed(requests), 4))
        sequential = [judge.judge(_requests(1, f"one{i}"))[0] for i in range(10)]
    assert sorted(o.text for o in out) == sorted("echo:" + r.user for r in requests)
    assert all(o.error is None for o in sequential)
    assert server.connections <= 4, server.connections  # 310 requests over the pool's connections


def test_a_reset_mid_reply_is_retried_then_answered():
    requests = _requests(10, "reset")
    with RawServer(lambda question, attempt: "reset" if attempt == 1 else "length") as server, \
            _judge(server) as judge:
        out = judge.judge(requests)
    _assert_echoed(requests, out)
    assert server.attempts == Counter({r.user: 2 for r in requests})


def test_a_reset_on_every_attempt_is_a_retryable_failure_not_a_crash():
    requests = _requests(3, "always")
    with RawServer(lambda question, attempt: "reset") as server, _judge(server, max_attempts=2) as judge:
        out = judge.judge(requests)
    assert [o.text for o in out] == [None] * 3
    assert all("failed after 2 attempts" in o.error and "APIConnectionError" in o.error for o in out), out


def test_an_idle_keep_alive_connection_closed_by_the_server_is_not_an_error():
    with RawServer(lambda question, attempt: "length", idle_close_s=0.2) as server, _judge(server) as judge:
        first = judge.judge(_requests(1, "before"))
        time.sleep(0.6)
        second = judge.judge(_requests(1, "after"))
    assert first[0].text == "echo:before question 0" and second[0].text == "echo:after question 0"
    assert server.attempts == Counter({"before question 0": 1, "after question 0": 1})
    assert server.connections == 2


@pytest.mark.parametrize("mode, position", [("stream", 0), ("batch", 0), ("stream", 10)])
def test_a_stalled_request_holds_no_other_request(mode, position):
    """The server accepts one request and never answers it, the run's first request (the one that goes alone to
    learn whether the key is accepted) or one in the middle. The others are answered at once, well before the
    stalled one's timeout, and the stalled one fails retryably (timeout) after its own attempts. (They wait for the
    first request's answer at most `connect_timeout_s`: a server refuses a bad key at once.)"""
    timeout_s, attempts = 2.0, 2
    requests = _requests(30, "fine")
    requests.insert(position, _requests(1, "stall")[0])
    others = [r for r in requests if r.key != "stall-0"]
    with RawServer(lambda question, attempt: "stall" if question.startswith("stall") else "length") as server, \
            _judge(server, timeout_s=timeout_s, connect_timeout_s=0.5, max_attempts=attempts,
                   max_in_flight=8, hedge=0) as judge:  # copies of a stalled request: test_http_hedging.py
        t0 = time.monotonic()
        out = list(judge.stream(ListFeed(requests), 8)) if mode == "stream" else judge.judge(requests)
    by_key = {o.key: o for o in out}
    assert [by_key[r.key].text for r in others] == ["echo:" + r.user for r in others]
    if mode == "stream":  # completion order: the stalled one comes last
        assert out[-1].key == "stall-0", [o.key for o in out]
    # every other request reached the server (and was answered at once) before the stalled one's first timeout
    waited = max(server.arrived[r.user] for r in others) - t0
    assert waited < timeout_s, f"the others were held {waited:.1f} s"
    stalled = by_key["stall-0"]
    assert stalled.text is None and "APITimeoutError" in stalled.error and f"{attempts} attempts" in stalled.error
    assert stalled.latency_s >= attempts * timeout_s * 0.95
    assert server.attempts["stall question 0"] == attempts


def test_waiting_for_a_free_connection_is_not_part_of_the_timeout():
    """40 requests, 2 connections, 0.1 s per reply: the last ones wait ~2 s for a connection; their timeout (1 s)
    counts from when they are sent, so none times out."""

    requests = _requests(40, "queued")
    with RawServer(lambda question, attempt: "slow") as server, \
            _judge(server, timeout_s=1.0, max_attempts=1, max_in_flight=2) as judge:
        out = judge.judge(requests)
    _assert_echoed(requests, out)
