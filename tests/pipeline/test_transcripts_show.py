"""Judge transcripts (issue 16, item 1 and its first Done-when): a recording OpenAI-compatible server receives a
sweep's judge requests, and `capeval show --json` returns exactly those messages and sampling for every request it
saw (first asks and re-asks alike), one attempt marked `sent` per request received, and the requests answered
from the judgment cache marked `cache`. A cell killed between its transcripts and its metrics is redone with
complete transcripts and no duplicates, without a single request.

The server answers CapQuiz's structured choice like benchmarks/loopback_server.py, except that a third of the
first asks (temperature 0) get an unparseable reply, so the engine re-asks at its re-ask temperature and seed."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from _sweeps import sweep_toml

from capeval.engine.cli import main
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep


class RecordingServer:
    """/v1/chat/completions on 127.0.0.1 (aiohttp, own thread) keeping every request body it receives."""

    def __init__(self):
        self.bodies: list[dict] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _reply(self, body: dict) -> str:
        from capeval.benchmarks.loopback_server import _user_text, answer_for

        digest = int(hashlib.sha256(_user_text(body).encode()).hexdigest()[:8], 16)
        if body.get("temperature") == 0.0 and digest % 3 == 0:
            return json.dumps({"answer": "no idea"})  # not one of the choices: rejected, re-asked
        return answer_for(body)

    def _serve(self) -> None:
        from aiohttp import web

        from capeval.benchmarks.loopback_server import completion_body

        async def chat(request):
            body = await request.json()
            self.bodies.append(body)
            return web.Response(body=completion_body(body, self._reply(body)), content_type="application/json")

        async def start():
            app = web.Application()
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
        assert self._ready.wait(30)
        return self

    def __exit__(self, *exc):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def _show(capsys, out: Path, *args) -> dict:
    capsys.readouterr()
    assert main(["show", str(out), "--json", "--limit", "0", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _sent(body: dict) -> tuple:
    """What a request body says, in the terms of a transcript: system, user text, sampling, the choices asked."""
    messages = {m["role"]: m["content"] for m in body["messages"]}
    choices = body["response_format"]["json_schema"]["schema"]["properties"]["answer"]["enum"]
    return (messages.get("system"), messages["user"], body["max_tokens"], body.get("temperature"), body["seed"],
            tuple(choices))


def _recorded(rec: dict, attempt: dict) -> tuple:
    messages = {m["role"]: m["content"] for m in rec["messages"]}
    s = rec["sampling"]
    return (messages.get("system"), messages["user"], s["max_tokens"], attempt["temperature"], attempt["seed"],
            tuple(s["choices"]))


@pytest.fixture(scope="module")
def judged(tmp_path_factory, ray_local):
    """A 2-video CapQuiz sweep judged twice by the same model under two labels: `first` asks the server, `again`
    finds every answer (re-asks included) in the judgment cache."""
    base = tmp_path_factory.mktemp("transcripts")
    with RecordingServer() as server:
        params = {"base_url": server.base_url, "model": "recorded", "api_key": "test-key"}
        sweep = base / "sweep.toml"
        sweep.write_text(sweep_toml("transcripts", n_videos=2, prompts=("brief",), frames=("uniform:2",),
                                    judges=[{"name": "openai", "label": "first", "params": params},
                                            # the same model (the same request keys), another entry
                                            {"name": "openai", "label": "again",
                                             "params": {**params, "max_in_flight": 8}}]))
        out = base / "out"
        result = run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None)
        assert result.exit_code == 0
        yield server, sweep, out


def test_show_returns_exactly_the_requests_the_server_saw(judged, capsys):
    server, _, out = judged
    shown = _show(capsys, out)
    records = shown["requests"]
    assert shown["matched"] == len(records) > 0
    verdicts = pl.read_parquet(out / "verdicts")
    assert len(records) == verdicts.height  # one transcript per verdict row (CapQuiz has one step)
    by_judge = {j: [r for r in records if r["cell"]["judge"] == j] for j in ("first", "again")}
    assert len(by_judge["first"]) == len(by_judge["again"]) == verdicts.height // 2
    # every request the server received is one attempt marked "sent", with the same messages and sampling
    sent = Counter(_recorded(r, a) for r in records for a in r["attempts"] if a["source"] == "sent")
    assert sent == Counter(_sent(b) for b in server.bodies)
    assert sum(sent.values()) == len(server.bodies)
    # the re-asks are there: a rejected first reply, its error, then a new ask at the re-ask temperature
    reasked = [r for r in by_judge["first"] if len(r["attempts"]) > 1]
    assert reasked, "the server rejected some first asks: they must show as re-asks"
    for r in reasked:
        first, last = r["attempts"][0], r["attempts"][-1]
        assert first["status"] == "failed" and first["error"] and "no idea" in first["reply"]
        assert first["temperature"] == 0.0 and last["temperature"] > 0 and last["seed"] != first["seed"]
        assert r["parse"]["status"] == "repaired" and r["verdict_label"] != "no verdict"
    # the second judge label sent nothing: every attempt came from the cache, with the first one's messages
    assert {a["source"] for r in by_judge["again"] for a in r["attempts"]} == {"cache"}
    first_msgs = {(r["item_id"], r["request_key"]): r["messages"] for r in by_judge["first"]}
    assert all(first_msgs[(r["item_id"], r["request_key"])] == r["messages"] for r in by_judge["again"])
    # joined to the verdict rows: the final verdict, raw reply and tokens are the verdict row's
    v = {(row["cell_key"], row["request_key"], row["item_id"]): row for row in verdicts.iter_rows(named=True)}
    for r in records:
        row = v[(r["cell_key"], r["request_key"], r["item_id"])]
        assert r["verdict"] == row["verdict"] and r["attempts"][-1]["reply"] == row["raw_output"]
        assert r["attempts"][-1]["prompt_tokens"] == row["prompt_tokens"] > 0
        assert r["caption"] and r["caption"] in r["messages"][-1]["content"]


def test_show_filters_and_prints_text(judged, capsys):
    _, _, out = judged
    records = _show(capsys, out)["requests"]
    item = records[0]["item_id"]
    one = _show(capsys, out, "--item", item, "--system", "judge=again")["requests"]
    assert [(r["item_id"], r["cell"]["judge"]) for r in one] == [(item, "again")]
    capsys.readouterr()
    assert main(["show", str(out), "--item", item, "--limit", "1"]) == 0
    text = capsys.readouterr().out
    assert "attempt 0 (" in text and records[0]["messages"][-1]["content"].splitlines()[0] in text
    assert main(["show", str(out), "--system", "judge=nobody"]) == 2
    assert "first" in capsys.readouterr().err  # the judges the run does hold


def test_a_killed_cell_is_redone_with_complete_transcripts(judged, capsys):
    server, sweep, out = judged
    before = {r["request_key"] + r["item_id"]: r for r in _show(capsys, out, "--system", "judge=first")["requests"]}
    key = next(iter({r["cell_key"] for r in before.values()}))
    # killed after its transcripts and verdicts were written, before its metrics (the commit point)
    (out / "metrics" / f"{key}.parquet").unlink()
    (out / "transcripts" / f".{key}.0badc0de.tmp").write_bytes(b"half a spool")
    n_bodies = len(server.bodies)
    assert run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None).exit_code == 0
    assert len(server.bodies) == n_bodies  # nothing asked again
    assert not list((out / "transcripts").glob(".*.tmp"))
    after = _show(capsys, out, "--system", "judge=first")["requests"]
    assert sorted(r["request_key"] + r["item_id"] for r in after) == sorted(before)  # complete, no duplicates
    assert {a["source"] for r in after for a in r["attempts"]} == {"cache"}
    assert all(r["messages"] == before[r["request_key"] + r["item_id"]]["messages"] for r in after)
    assert pl.read_parquet(out / "transcripts").height == pl.read_parquet(out / "verdicts").height
