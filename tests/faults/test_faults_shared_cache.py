"""Two `capeval judge` processes on one judgment cache (issue 8, finding 5): started together on the same items
against one loopback judge, they send each distinct request once in total and both write every verdict."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import polars as pl

from capeval.benchmarks.loopback_server import _user_text, answer_for, completion_body
from _faults_support import AppServer, finish, start_capeval
from capeval.engine import exitcodes

N_VIDEOS = 60


def test_two_judges_on_one_cache_send_each_key_once(tmp_path):
    from aiohttp import web

    sent: Counter = Counter()
    gate = asyncio.Event()

    async def chat(request):
        body = await request.json()
        sent[_user_text(body)] += 1
        # Hold the first answers until more requests arrived than one process keeps in flight (4), or for 5 s:
        # the two processes start together, so both are judging while answers are held.
        if sum(sent.values()) > 4:
            gate.set()
        try:
            await asyncio.wait_for(gate.wait(), timeout=5)
        except asyncio.TimeoutError:
            gate.set()
        await asyncio.sleep(0.02)
        return web.Response(body=completion_body(body, answer_for(body)), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    with items.open("w") as f:
        for v in range(N_VIDEOS):
            f.write(json.dumps({"item_id": f"v{v}/q", "video_id": f"v{v}", "task": "counting",
                                "annotation": "How many shapes are visible?", "options": ["1", "2", "3", "4", "5"],
                                "answer": "2", "category": "counting"}) + "\n")
    with captions.open("w") as f:
        for v in range(N_VIDEOS):
            f.write(json.dumps({"video_id": f"v{v}", "caption": f"Video {v}: {v % 5 + 1} shapes move."}) + "\n")
    with AppServer(app) as server:
        # no tail hedging: its copies of a request still running at the drain would be counted as sent twice
        def judge(name: str):
            return start_capeval(["judge", "--protocol", "capquiz", "--items", items, "--captions", captions,
                                  "--judge", "openai", "--base-url", server.base_url, "--judge-model", "loopback",
                                  "--judge-option", "api_key=\"k\"", "--judge-option", "structured=\"vllm\"",
                                  "--judge-option", "max_in_flight=4", "--judge-option", "hedge=0",
                                  "--cache", tmp_path / "cache",
                                  "--out", tmp_path / f"{name}.parquet", "--no-progress", "--resamples", "0"])

        procs = [judge("a"), judge("b")]
        runs = [finish(p, timeout=300) for p in procs]
    for run in runs:
        assert run.returncode == exitcodes.OK, run
    assert len(sent) == N_VIDEOS  # one distinct prompt per item
    assert max(sent.values()) == 1, {k[:40]: n for k, n in sent.items() if n > 1}
    a, b = (pl.read_parquet(tmp_path / f"{n}.parquet").sort("item_id") for n in "ab")
    assert a.height == b.height == N_VIDEOS
    assert a["raw_output"].to_list() == b["raw_output"].to_list() and (a["verdict"] >= 0).all()
