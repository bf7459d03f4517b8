"""The reply-size cap holds before a reply is in memory (issue 26, item 5): a loopback server sends a 300 MB chat
completion, and a 0.3 MB gzip body that inflates to 300 MB; the judge, in its own process, reads bodies in chunks,
stops at `max_reply_bytes` (decompressed bytes) and reports "reply too large". Its peak RSS
(resource.getrusage in that process) stays within a few tens of MB of the same process judging a normal reply."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

HUGE = 300 * 2**20
CHUNK = 2**20
_HEAD = b'{"id":"x","object":"chat.completion","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"'
_TAIL = b'"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}'
ROOT = Path(__file__).resolve().parents[2]

JUDGE = """
import json, resource, sys
from capeval.adapters.base import JudgeRequest
from capeval.adapters.openai_http import OpenAIJudge
with OpenAIJudge(model=sys.argv[2], base_url=sys.argv[1], api_key="k", max_attempts=2, backoff_base_s=0.01) as judge:
    [out] = judge.judge([JudgeRequest(key="k", user="hello", max_tokens=8)])
print(json.dumps({"error": out.error, "text": None if out.text is None else len(out.text),
                  "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _gzip_bomb() -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [z.compress(_HEAD)]
    block = b"a" * CHUNK
    parts += [z.compress(block) for _ in range(HUGE // CHUNK)]
    parts += [z.compress(_TAIL), z.flush()]
    return b"".join(parts)


class BigReplyServer:
    def __init__(self):
        self.bomb = _gzip_bomb()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        from aiohttp import web

        async def chat(request):
            model = (await request.json())["model"]
            if model == "normal":
                return web.Response(body=_HEAD + b"fine" + _TAIL, content_type="application/json")
            if model == "bomb":
                return web.Response(body=self.bomb, content_type="application/json",
                                    headers={"Content-Encoding": "gzip"})
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            if model == "huge-declared":
                resp.content_length = len(_HEAD) + HUGE + len(_TAIL)
            await resp.prepare(request)
            block = b"a" * CHUNK
            try:
                await resp.write(_HEAD)
                for _ in range(HUGE // CHUNK):
                    await resp.write(block)
                await resp.write(_TAIL)
                await resp.write_eof()
            except (ConnectionError, RuntimeError):  # the client stopped reading: what it should do
                pass
            return resp

        async def start():
            app = web.Application(client_max_size=2**20)
            app.router.add_post("/v1/chat/completions", chat)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(60)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def server():
    with BigReplyServer() as s:
        yield s


def _judge(server, model: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", JUDGE, f"http://127.0.0.1:{server.port}/v1", model], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_bomb_is_small_on_the_wire(server):
    assert len(server.bomb) < 2 * 2**20  # the point of the case: a small body that inflates 300 MB


@pytest.mark.parametrize("model", ["huge", "huge-declared", "bomb"])
def test_oversize_reply_stops_at_the_cap_without_holding_it(server, model):
    normal = _judge(server, "normal")
    assert normal["error"] is None and normal["text"] == 4
    big = _judge(server, model)
    assert big["text"] is None
    assert "reply too large" in big["error"] and "max_reply_bytes" in big["error"], big["error"]
    grown_mb = (big["peak_kb"] - normal["peak_kb"]) / 1024
    assert grown_mb < 64, f"peak RSS {big['peak_kb'] / 1024:.0f} MB vs {normal['peak_kb'] / 1024:.0f} MB for a normal reply"
