"""The lean HTTP/1.1 pool (adapters/http_transport.py) against a real aiohttp server that answers the awkward ways
real servers do: chunked bodies, `Connection: close`, idle keep-alive connections closed by the server, stalls."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from adapters.http_transport import LeanPool, TransportTimeout, choose_transport

CHAT = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}


@pytest.fixture(scope="module")
def odd_server():
    """/chunked: body in 3 chunks; /close: answers with Connection: close; /slow: 2 s; /plain: normal. The server
    drops idle keep-alive connections after 0.2 s."""
    from aiohttp import web

    async def chunked(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        raw = json.dumps(CHAT).encode()
        for i in range(0, len(raw), len(raw) // 3 + 1):
            await resp.write(raw[i : i + len(raw) // 3 + 1])
        await resp.write_eof()
        return resp

    async def close(request):
        await request.read()
        return web.json_response(CHAT, headers={"Connection": "close"})

    async def slow(request):
        await asyncio.sleep(2.0)
        return web.json_response(CHAT)

    async def plain(request):
        return web.json_response({"echo": (await request.json())["n"]})

    ready = threading.Event()
    holder = {}

    def main():
        loop = asyncio.new_event_loop()
        app = web.Application()
        for path, fn in (("/chunked", chunked), ("/close", close), ("/slow", slow), ("/plain", plain)):
            app.router.add_post(path, fn)
        runner = web.AppRunner(app, keepalive_timeout=0.2, access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        holder["port"] = site._server.sockets[0].getsockname()[1]
        holder["loop"], holder["runner"] = loop, runner
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"http://127.0.0.1:{holder['port']}"
    holder["loop"].call_soon_threadsafe(holder["loop"].stop)
    thread.join(10)


def _run(coro):
    return asyncio.run(coro)


def test_chunked_and_connection_close(odd_server):
    base = odd_server

    async def go():
        chunked = LeanPool(base + "/chunked", 2, {"Content-Type": "application/json"})
        closing = LeanPool(base + "/close", 2, {"Content-Type": "application/json"})
        a = [await chunked.post(b"{}", 5) for _ in range(3)]
        b = [await closing.post(b"{}", 5) for _ in range(3)]
        kept, dropped = len(chunked.idle), len(closing.idle)
        await chunked.close()
        await closing.close()
        return a, b, kept, dropped

    a, b, kept, dropped = _run(go())
    assert all(status == 200 and json.loads(body) == CHAT for status, _, body in a + b)
    assert a[0][1].get("transfer-encoding") == "chunked"
    assert kept == 1 and dropped == 0  # keep-alive reused; "Connection: close" never pooled


def test_stale_keepalive_connection_is_resent_once(odd_server):
    """The server closes the pooled connection after 0.2 s idle; the next request still succeeds."""
    base = odd_server

    async def go():
        pool = LeanPool(base + "/plain", 4, {"Content-Type": "application/json"})
        first = await pool.post(b'{"n": 1}', 5)
        await asyncio.sleep(0.6)
        second = await pool.post(b'{"n": 2}', 5)
        await pool.close()
        return first, second

    first, second = _run(go())
    assert json.loads(first[2]) == {"echo": 1} and json.loads(second[2]) == {"echo": 2}


def test_timeout_drops_connection_and_limit_queues(odd_server):
    base = odd_server

    async def go():
        pool = LeanPool(base + "/slow", 1, {})
        with pytest.raises(TransportTimeout):
            await pool.post(b"{}", 0.3)
        assert pool.n_open == 0
        plain = LeanPool(base + "/plain", 3, {"Content-Type": "application/json"})
        results = await asyncio.gather(*(plain.post(json.dumps({"n": i}).encode(), 5) for i in range(40)))
        opened = plain.n_open
        await plain.close()
        return results, opened

    results, opened = _run(go())
    assert [json.loads(body)["echo"] for _, _, body in results] == list(range(40))
    assert opened <= 3


def test_choose_transport(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy",
                "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    assert choose_transport("http://127.0.0.1:8000/v1") == "lean"
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert choose_transport("https://api.openai.com/v1") == "aiohttp"
    assert choose_transport("https://api.openai.com/v1", "lean") == "lean"
    with pytest.raises(ValueError, match="transport"):
        choose_transport("http://x/v1", "sdk")
