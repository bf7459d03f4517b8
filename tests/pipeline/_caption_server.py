"""A recording OpenAI-compatible captioner server on 127.0.0.1 for the caption-stage tests: it keeps every request
body as received, answers "caption of <user text's first 40 characters>" (or the content `contents` gives for the
request's model), and sleeps `slow_s` for a request whose user text contains SLOW (else `latency_s`), so a test can
hold one request back and see whether the others wait."""

from __future__ import annotations

import asyncio
import json
import threading
import time

SLOW = "__SLOW__"


class RecordingServer:
    def __init__(self, *, latency_s: float = 0.02, slow_s: float = 2.0, contents: dict[str, str] | None = None):
        self.latency_s, self.slow_s = latency_s, slow_s
        self.contents = contents or {}  # model -> the reply's content, instead of "caption of ..."
        self.bodies: list[dict] = []
        self.in_flight = self.max_in_flight = 0
        self.answered: list[tuple[str, float]] = []  # (user text, time) as answers go out
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self.port = None

    @staticmethod
    def user_text(body: dict) -> str:
        content = body["messages"][-1]["content"]
        if isinstance(content, str):
            return content
        return "".join(part["text"] for part in content if part.get("type") == "text")

    async def _chat(self, request):
        from aiohttp import web

        body = json.loads(await request.read())
        self.bodies.append(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            text = self.user_text(body)
            await asyncio.sleep(self.slow_s if SLOW in text else self.latency_s)
            self.answered.append((text, time.monotonic()))
            reply = {"id": "x", "object": "chat.completion", "model": body.get("model"),
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant",
                                              "content": self.contents.get(body.get("model"),
                                                                           f"caption of {text[:40]}")}}],
                     "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}}
            return web.json_response(reply)
        finally:
            self.in_flight -= 1

    def _main(self) -> None:
        from aiohttp import web

        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._runner = runner
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "RecordingServer":
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
