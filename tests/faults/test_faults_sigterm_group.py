"""SIGTERM to the whole process group — what Slurm does at a time limit: every process of the job, Ray's GCS, raylet,
agents and workers too, gets the signal at once. The driver must end as it does for a SIGTERM of its own (exit 143,
one line, a run.json record with status `interrupted` and what the run paid), never wait on its dead Ray (Ray's core
worker ends a driver that lost its GCS after 60 s, with exit 1 and no record), leave no Ray process behind (the
watchdog, engine/ray_reaper.py) and leave a folder the next run completes. Real `capeval sweep` processes in their own
session with a real local Ray; one loopback app serves the captioner and the judge and sends the signal with
os.killpg when the n-th request of a kind arrives; each case is repeated, as the hang came in 2 of 5 trials."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Callable

import pytest

from _faults_support import (COMMIT_EACH_ROW, AppServer, caption_stored, cli_env, finish, openai_judge, start_capeval,
                             sweep_text, synthetic, wait_until_ready)
from _ray_session import session_processes, survivors, wait_until
from capeval.benchmarks.loopback_server import answer_for, completion_body
from capeval.engine import exitcodes

N_VIDEOS = 4
REPEATS = 3
PRICES = {"input": 1.0, "output": 2.0}
END_BOUND_S = 40  # well under Ray's 60 s before it ends a driver whose GCS is gone
REAP_BOUND_S = 20


class GroupSignallingServer:
    """Captions (model "cap") and judge answers (any other model) after `delay_s`; when the `at`-th request of kind
    `kind` arrives, the processes of the victim's session are noted and SIGTERM goes to its whole process group."""

    def __init__(self, delay_s: float = 0.3):
        self.delay_s = delay_s
        self.counts = {"caption": 0, "judge": 0}
        self.kind: str | None = None
        self.at = 0
        self.victim: int | None = None
        self.group: dict = {}  # pid -> start time of every process of the victim's session at the signal
        self.group_names: dict = {}  # pid -> name of those
        self.sent = threading.Event()
        self.sent_at = 0.0
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
                self.group = session_processes(self.victim)
                self.group_names = survivors(self.group)
                os.killpg(self.victim, signal.SIGTERM)
                self.sent_at = time.monotonic()
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


@pytest.mark.parametrize("kind, at", [("caption", 2), ("judge", 3)], ids=["mid-caption", "mid-judge"])
def test_sigterm_to_the_process_group_ends_the_run_with_its_record_and_no_ray_left(tmp_path, sweep_file, kind, at):
    server = GroupSignallingServer()
    with AppServer(server.app()) as http:
        path = sweep_file(_sweep_text(http.base_url))
        for trial in range(REPEATS):
            out = tmp_path / f"out{trial}"
            server.counts = {"caption": 0, "judge": 0}
            server.kind, server.at, server.victim, server.group = kind, at, None, {}
            server.sent.clear()
            server.ready = caption_stored(out) if kind == "caption" else (lambda: True)
            proc = start_capeval(["sweep", path, "--out", out, "--no-progress"], env=cli_env(**COMMIT_EACH_ROW))
            server.victim = proc.pid
            try:
                stdout, stderr = proc.communicate(timeout=END_BOUND_S + 120)
                ended_s = time.monotonic() - server.sent_at
                assert server.sent.is_set(), stderr[-3000:]
                # the Ray processes of the run end (SIGTERM, or the watchdog once the driver is gone)
                left = wait_until(lambda: not survivors(server.group), REAP_BOUND_S)
                assert left, f"trial {trial}: {REAP_BOUND_S}s after the driver ended: alive {survivors(server.group)}"
            finally:
                finish(proc, timeout=10)  # kills what is left of the session, whatever failed above
            assert {"gcs_server", "raylet"} <= set(server.group_names.values()), server.group_names  # Ray was up
            run = f"trial {trial}: exit {proc.returncode}\n{stderr[-3000:]}"
            assert proc.returncode == exitcodes.TERMINATED, run
            assert ended_s < END_BOUND_S, f"{run}\nthe driver ended {ended_s:.0f}s after the signal"
            assert "SIGTERM received" not in stderr and "PC: @" not in stderr and "Traceback" not in stderr, run
            assert stderr.strip().splitlines()[-1] == \
                "capeval sweep: terminated (SIGTERM); finished work is kept and a rerun resumes", run
            (record,) = _records(out)
            assert record["status"] == "interrupted" and record["interrupted_by"] == "SIGTERM", run
            assert record["cost"]["captioners"]["openai"]["paid_in_run"]["requests"] >= 1, run
            assert record["cost"]["paid_in_run_usd"] > 0, run

        server.kind = None  # the last folder resumes to the end
        again = finish(start_capeval(["sweep", path, "--out", out, "--no-progress"], env=cli_env()), timeout=300)
    assert again.returncode == exitcodes.OK, again
    assert [r["status"] for r in _records(out)] == ["interrupted", "finished"]
