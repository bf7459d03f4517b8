"""Live accounting (issue 16, item 6): retries, rate limits and failures are shown while the judge runs -- counts
on the judge's progress line, and a warning when the failure share of finished requests passes
`[options] warn_failure_share` (once, then each further 10 points).

The sweep test is real end to end: a sweep file (items + a captions file, CapQuiz), the OpenAI-compatible judge
over HTTP against the loopback server (benchmarks/loopback_server.py), which answers a seeded share of attempts
with 429 (Retry-After 0) or 500; the judge makes 2 attempts, so a request faulted twice fails."""

from __future__ import annotations

import io
import json
import re

import pytest

from capeval.engine.judging.live import MIN_FINISHED, LiveCounts
from capeval.engine.stages.progress import Bar


def test_warning_once_then_each_further_ten_points():
    said: list[str] = []
    live = LiveCounts("j", warn_share=0.05, warn=said.append)
    for k in range(MIN_FINISHED - 1):  # 1 of 9 failed: above 5%, but too few requests to call it a trend
        live.answered(failed=k == 0, error="HTTP 500 InternalServerError: boom" if k == 0 else None)
    assert said == []
    live.answered(failed=False)  # 1 of 10: 10%
    assert len(said) == 1 and "1 of 10 finished requests failed (10.0%" in said[0]
    assert "warn_failure_share 5%" in said[0] and "first error: HTTP 500 InternalServerError: boom" in said[0]
    live.answered(failed=True)  # 2 of 11: 18.2%, not yet 10 points above the last warning
    assert len(said) == 1
    live.answered(failed=True)  # 3 of 12: 25%
    assert len(said) == 2 and "3 of 12" in said[1]
    for _ in range(100):  # the share falls back: nothing more to say
        live.answered(failed=False)
    assert len(said) == 2
    quiet = LiveCounts("j", warn_share=0.05, warn=said.append)
    quiet.answered(failed=True, error="timeout")  # a run smaller than MIN_FINISHED: warned at its end
    quiet.close()
    assert len(said) == 3 and "1 of 1" in said[2]


def test_counts_reach_the_plain_progress_line_from_any_thread():
    import threading

    stream = io.StringIO()
    bar = Bar(0, "judge j", "req", True, stream=stream, every_s=0, growing=True)
    bar.grow(4)
    live = LiveCounts("j", bar=bar)
    worker = threading.Thread(target=lambda: [live.retried(k) for k in ("429", "429", "5xx")])
    worker.start()
    worker.join()
    live.answered(failed=True, error="x")
    bar.update(1)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert any("retries 3 (429: 2, 5xx: 1)" in line for line in lines[:-1])  # printed while retrying
    assert lines[-1].startswith("judge j: 1/4 req") and lines[-1].endswith("retries 3 (429: 2, 5xx: 1), "
                                                                           "failed 1/1 (100.0%)")


N_VIDEOS, N_QUESTIONS = 12, 5


def _sweep(tmp_path, base_url: str):
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    with items.open("w") as f:
        for v in range(N_VIDEOS):
            for q in range(N_QUESTIONS):
                f.write(json.dumps({"item_id": f"v{v}/q{q}", "video_id": f"v{v}", "task": "counting",
                                    "annotation": f"How many shapes are in clip {v}, question {q}?",
                                    "options": ["1", "2", "3", "4"], "answer": "2", "category": "counting",
                                    "benchmark": "capquiz"}) + "\n")
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": f"Clip {v}: two red squares move."})
                                + "\n" for v in range(N_VIDEOS)))
    # hedge=0: the counts below compare one request per item with the server's (hedge copies are counted apart:
    # tests/adapters/test_http_hedging.py)
    judge = {"base_url": base_url, "model": "loopback", "api_key": "test-key", "structured": "vllm",
             "max_attempts": 2, "backoff_base_s": 0.01, "max_in_flight": 4, "hedge": 0}
    params = ", ".join(f"{k} = {json.dumps(v)}" for k, v in judge.items())
    sweep = tmp_path / "faulty.toml"
    sweep.write_text(f'name = "faulty"\n[[datasets]]\nname = "quiz"\nkind = "items"\npath = "{items}"\n'
                     f'[[captions]]\npath = "{captions}"\ncaptioner = "mine"\n[[protocols]]\nname = "capquiz"\n'
                     f'[[judges]]\nname = "openai"\nparams = {{ {params} }}\n'
                     '[options]\nn_resamples = 20\nwarn_failure_share = 0.05\n')
    return sweep


def test_sweep_shows_retries_and_failures_while_judging(tmp_path, ray_local, monkeypatch, capsys):
    from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
    from capeval.engine.sweep.config import load_sweep
    from capeval.engine.sweep.runner import run_sweep

    monkeypatch.setenv("CAPEVAL_PROGRESS_EVERY_S", "0")  # a plain line at every answer (stderr is not a terminal)
    with LoopbackServer(FaultConfig(rate=0.6, kinds=("429", "500"), retry_after_s=0, seed=7)) as server:
        run_sweep(load_sweep(_sweep(tmp_path, server.base_url)), tmp_path / "out", progress=True,
                  log=lambda m: None)
        outcomes = server.stats()["outcomes"]
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("judge loopback: ")]
    assert lines, err[-3000:]
    total = N_VIDEOS * N_QUESTIONS
    last = lines[-1]
    assert last.startswith(f"judge loopback: {total}/{total} req")
    # the final counts are the server's: each 429 / 500 it sent was retried or ended a request's last attempt
    retried = {k: int(n) for k, n in re.findall(r"(429|5xx): (\d+)", last)}
    failed, finished = map(int, re.search(r"failed (\d+)/(\d+)", last).groups())
    assert finished == total and outcomes["ok"] == total - failed
    assert retried.get("429", 0) + retried.get("5xx", 0) + failed == outcomes.get("429", 0) + outcomes.get("500", 0)
    assert retried.get("429") and retried.get("5xx")
    # ... and they were on the progress line while the judge was still running
    running = [line for line in lines[:-1] if not line.startswith(f"judge loopback: {total}/")]
    assert any("retries" in line for line in running) and any("failed" in line for line in running)
    warnings = [line for line in err.splitlines() if line.startswith("warning: judge loopback:")]
    assert warnings and "above warn_failure_share 5%" in warnings[0] and "first error:" in warnings[0]
    share = [float(x) for x in re.findall(r"failed \((\d+\.\d)%", " ".join(warnings))]
    assert all(b >= a + 10 for a, b in zip(share, share[1:]))  # again only 10 points further up
    assert err.index(warnings[0]) < err.index(last)  # warned before the end


def test_warn_failure_share_must_be_a_share(tmp_path):
    from capeval.engine.sweep.config import SweepFileError, load_sweep

    sweep = _sweep(tmp_path, "http://127.0.0.1:9/v1")
    sweep.write_text(sweep.read_text().replace("warn_failure_share = 0.05", "warn_failure_share = 5"))
    with pytest.raises(SweepFileError, match="options.warn_failure_share: must be a share from 0 to 1"):
        load_sweep(sweep)
