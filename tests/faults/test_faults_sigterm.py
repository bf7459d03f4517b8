"""SIGTERM — what Slurm and Kubernetes send at a time limit — mid-caption and mid-judge (issue 25, item 3): the run
ends as Ctrl-C does: one line, finished work kept, a run.json record with status `interrupted` and what the run
paid, exit 143 (128 + SIGTERM); never Ray's C++ stack dump and exit 134. Real `capeval sweep` processes (their own
session, a real local Ray), an OpenAI-compatible captioner and judge served on 127.0.0.1 by one loopback app that
sends the signal itself when the n-th request of a kind arrives; the next run resumes the folder."""

from __future__ import annotations

import json
import os
import signal
import threading
from typing import Callable

import pytest

from _faults_support import (COMMIT_EACH_ROW, AppServer, caption_stored, cli_env, finish, openai_judge, start_capeval,
                             sweep_text, synthetic, wait_until_ready)
from capeval.benchmarks.loopback_server import answer_for, completion_body
from capeval.engine import exitcodes

N_VIDEOS = 4
PRICES = {"input": 1.0, "output": 2.0}


class SignallingServer:
    """Captions (model "cap") and judge answers (any other model) after `delay_s`; when the `at`-th request of kind
    `kind` arrives, `signum` goes to `victim` (a real signal from outside, as a scheduler sends it)."""

    def __init__(self, delay_s: float = 0.3, signum: int = signal.SIGTERM):
        self.delay_s, self.signum = delay_s, signum
        self.counts = {"caption": 0, "judge": 0}
        self.kind: str | None = None
        self.at = 0
        self.victim: int | None = None
        self.sent = threading.Event()
        self.ready: Callable[[], bool] = lambda: True  # the signal waits (at most a minute) until this holds

    def app(self):
        import asyncio

        from aiohttp import web

        async def chat(request):
            body = await request.json()
            kind = "caption" if body.get("model") == "cap" else "judge"
            self.counts[kind] += 1
            if kind == self.kind and self.counts[kind] >= self.at and self.victim and not self.sent.is_set():
                await wait_until_ready(self.ready)
                os.kill(self.victim, self.signum)
                self.sent.set()
            await asyncio.sleep(self.delay_s)
            content = "a red circle moves to the left over a blue square" if kind == "caption" else answer_for(body)
            return web.Response(body=completion_body(body, content), content_type="application/json")

        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", chat)
        return app


def _sweep_text(base_url: str) -> str:
    text = sweep_text(dataset=synthetic(N_VIDEOS, duration_s=0.5),
                      judge={**openai_judge(base_url, max_in_flight=1), "prices": PRICES})
    captioner = ('[[captioners]]\nname = "openai"\nprices = { input = 1.0, output = 2.0 }\n'
                 f'params = {{ base_url = "{base_url}", model = "cap", api_key = "test-key", max_in_flight = 1 }}\n')
    assert '[[captioners]]\nname = "local"\n' in text
    return text.replace('[[captioners]]\nname = "local"\n', captioner)


def _records(out) -> list[dict]:
    return json.loads((out / "run.json").read_text())["runs"]


ENDINGS = {signal.SIGTERM: (exitcodes.TERMINATED, "terminated (SIGTERM)", "SIGTERM"),
           signal.SIGINT: (exitcodes.INTERRUPTED, "interrupted", "SIGINT")}


@pytest.mark.parametrize("kind, at, signum", [("caption", 2, signal.SIGTERM), ("judge", 3, signal.SIGTERM),
                                              ("judge", 3, signal.SIGINT)],
                         ids=["caption-SIGTERM", "judge-SIGTERM", "judge-SIGINT"])
def test_sigterm_ends_the_run_like_ctrl_c_with_its_record_and_cost(tmp_path, sweep_file, kind, at, signum):
    code, how, name = ENDINGS[signum]
    server = SignallingServer(signum=signum)
    with AppServer(server.app()) as http:
        path = sweep_file(_sweep_text(http.base_url))
        out = tmp_path / "out"
        server.kind, server.at = kind, at
        server.ready = caption_stored(out) if kind == "caption" else (lambda: True)
        proc = start_capeval(["sweep", path, "--out", out, "--no-progress"], env=cli_env(**COMMIT_EACH_ROW))
        server.victim = proc.pid
        run = finish(proc, timeout=300)
        assert server.sent.is_set(), run
        before = dict(server.counts)

        assert run.returncode == code == 128 + signum, run
        assert "SIGTERM received" not in run.stderr and "PC: @" not in run.stderr and "Traceback" not in run.stderr
        last = run.stderr.strip().splitlines()[-1]
        assert last == f"capeval sweep: {how}; finished work is kept and a rerun resumes", run.stderr
        assert (out / "run.json").is_file(), run
        (record,) = _records(out)
        assert record["status"] == "interrupted" and record["interrupted_by"] == name
        cost = record["cost"]
        assert cost["captioners"]["openai"]["paid_in_run"]["requests"] >= 1  # captions made before the signal
        assert cost["paid_in_run_usd"] > 0
        if kind == "judge":
            assert cost["judges"]["openai"]["paid_in_run"]["requests"] >= at - 1  # answers in before the signal

        server.kind = None  # the rerun resumes: what was made before the signal is not asked again
        again = finish(start_capeval(["sweep", path, "--out", out, "--no-progress"], env=cli_env()), timeout=300)
    assert again.returncode == exitcodes.OK, again
    assert [r["status"] for r in _records(out)] == ["interrupted", "finished"]
    made = _records(out)[1]["counts_by_status"]["captions"]
    assert made["cached"] >= 1 and made.get("captioned", 0) == N_VIDEOS - made["cached"]
    total_captions = server.counts["caption"]
    assert total_captions <= N_VIDEOS + 1, server.counts  # at most the one in flight at the signal asked twice
    if kind == "judge":
        resent = server.counts["judge"] - before["judge"]
        assert resent < server.counts["judge"] and before["judge"] >= at, server.counts
