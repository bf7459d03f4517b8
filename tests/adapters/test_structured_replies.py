"""The default OpenAI-compatible judge against servers that answer a structured choice their own way (issue 25,
item 1), on a real loopback server (aiohttp, own thread) and the real `capeval judge` / `capeval show` commands:

- a server that writes the JSON object with whitespace (as stock vLLM does) gets a token budget that fits it;
- a server that ignores `response_format` and answers a bare letter is read by CapQuiz's own text parser;
- a reply cut at max_tokens is reported as truncated (finish_reason=length, the limit, the option that raises it),
  sent once (never retried as if transient), and `capeval show --failed` shows its raw reply;
- a base URL without /v1 gives an error naming the URL and the missing /v1 (issue 25, item 13)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter

import polars as pl
import pytest

from capeval.adapters.base import JudgeRequest
from capeval.adapters.openai_http import OpenAIJudge
from capeval.engine.cli import main

TOKENS_OF_PRETTY_OBJECT = 12  # '{\n  "answer": "A"\n}' in a small BPE vocabulary: well over the bare letter's 8


class ChoiceServer:
    """/v1/chat/completions that answers the first option of a structured choice in the style its model name asks:
    `pretty` writes '{\\n  "answer": "A"\\n}' and stops at max_tokens as a real server does (counting a token per
    TOKENS_OF_PRETTY_OBJECT share of the object), `plain` ignores response_format and writes the bare letter."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.paths: Counter = Counter()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _completion(self, body: dict) -> dict:
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema") or {}
        enum = ((schema.get("properties") or {}).get("answer") or {}).get("enum") or ["A"]
        finish = "stop"
        if body["model"] == "plain":
            content = enum[0]
        else:
            content = json.dumps({"answer": enum[0]}, indent=2)
            if body["max_tokens"] < TOKENS_OF_PRETTY_OBJECT:  # cut where a real server stops generating
                content, finish = content[: max(1, body["max_tokens"]) + 3], "length"
        return {"id": "x", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}

    def _serve(self) -> None:
        from aiohttp import web

        async def chat(request):
            self.paths[request.path] += 1
            body = await request.json()
            self.bodies.append(body)
            return web.json_response(self._completion(body))

        async def start():
            app = web.Application()
            app.router.add_post("/v1/chat/completions", chat)
            app.router.add_post("/chat/completions", lambda r: web.json_response({"detail": "Not Found"}, status=404))
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
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture()
def server():
    with ChoiceServer() as s:
        yield s


def _items(tmp_path, n: int = 6):
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    items.write_text("".join(json.dumps({
        "item_id": f"v{i}/q", "video_id": f"v{i}", "task": "colour", "annotation": "What colour is the ball?",
        "options": ["red", "blue", "green"], "answer": "red"}) + "\n" for i in range(n)))
    captions.write_text("".join(json.dumps({"video_id": f"v{i}", "caption": f"A red ball rolls for {i + 2} seconds.",
                                            "captioner": "mine"}) + "\n" for i in range(n)))
    return items, captions


def _judge(tmp_path, server, model: str, *options: str) -> tuple[int, pl.DataFrame]:
    items, captions = _items(tmp_path)
    out = tmp_path / f"{model}.parquet"
    opts = [a for o in options for a in ("--judge-option", o)]
    rc = main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions),
               "--judge", "openai", "--judge-model", model, "--base-url", server.base_url,
               "--judge-option", "api_key=k", *opts, "--cache", str(tmp_path / f"cache-{model}"), "--out", str(out)])
    return rc, pl.read_parquet(out)


def test_default_judge_fits_a_pretty_printed_choice(tmp_path, server):
    rc, verdicts = _judge(tmp_path, server, "pretty")
    assert rc == 0
    assert (verdicts["verdict"] >= 0).all(), verdicts.select("error").to_series().to_list()
    assert {b["max_tokens"] for b in server.bodies} == {8 + 32}  # CapQuiz strict's 8 plus the object's allowance


def test_server_ignoring_response_format_is_read_by_the_text_parser(tmp_path, server):
    rc, verdicts = _judge(tmp_path, server, "plain")
    assert rc == 0
    assert (verdicts["verdict"] >= 0).all(), verdicts.select("error").to_series().to_list()
    assert set(verdicts["raw_output"].to_list()) == {"A"}
    assert len(server.bodies) == 6  # one request per item: nothing re-asked, nothing retried


def test_truncated_reply_is_reported_once_and_shown(tmp_path, server, capsys):
    rc, verdicts = _judge(tmp_path, server, "pretty", "choice_json_tokens=0", "max_attempts=6")
    assert (verdicts["verdict"] < 0).all()
    errors = set(verdicts["error"].to_list())
    assert len(errors) == 1
    error = errors.pop()
    assert "truncated" in error and "finish_reason=length" in error and "max_tokens=8" in error, error
    assert "choice_json_tokens" in error, error  # the option that raises the limit
    # never retried by the HTTP client as if transient: one request per ask (first ask and the engine's re-asks)
    per_ask = Counter((b["seed"], b.get("temperature"), b["messages"][-1]["content"]) for b in server.bodies)
    assert set(per_ask.values()) == {1}, per_ask
    capsys.readouterr()
    assert main(["show", str(tmp_path / "pretty.parquet"), "--failed", "--limit", "0", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    attempts = [a for r in shown["requests"] for a in r["attempts"]]
    assert attempts and all(a["reply"] == '{\n  "answer' for a in attempts), attempts[:2]
    assert all("truncated" in a["error"] for a in attempts)


def test_base_url_without_v1_names_the_url_and_the_missing_v1(server):
    base = server.base_url.removesuffix("/v1")
    with OpenAIJudge(model="pretty", base_url=base, api_key="k", max_attempts=2) as judge:
        [out] = judge.judge([JudgeRequest(key="k", user="hi")])
    assert out.text is None
    assert f"{base}/chat/completions" in out.error and "/v1" in out.error.split("chat/completions", 1)[1], out.error
    assert "Not Found" in out.error
