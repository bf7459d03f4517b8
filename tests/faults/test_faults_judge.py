"""The judge side of a sweep under faults (issue 8, finding 2): a judge server that is down makes the cell
incomplete (exit 3) and the rerun, with the server up, sends exactly the failed requests and completes it; 30%
injected 429/500/stall/garbage answers lose nothing; a judge that refuses authentication stops the run (exit 4)
after a few requests instead of spending the workload."""

from __future__ import annotations

import polars as pl
import pytest

from capeval.benchmarks.loopback_server import FaultConfig, make_app
from _faults_support import AppServer, assert_no_duplicates, free_port, openai_judge, read_store, sweep, sweep_text, synthetic
from capeval.engine import exitcodes

N_VIDEOS, ITEMS_PER_VIDEO = 2, 4
N_ITEMS = N_VIDEOS * ITEMS_PER_VIDEO


def _results(out) -> pl.DataFrame:
    cols = ["prompt_id", "frame_spec", "family", "question_type", "metric", "value", "ci_low", "ci_high", "n",
            "n_no_verdict"]
    return pl.read_parquet(out / "results.parquet").select(cols).sort(cols[:5])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run against a healthy loopback judge: the results every faulty run must reach."""
    d = tmp_path_factory.mktemp("reference")
    with AppServer(make_app(FaultConfig(log_attempts=False))) as server:
        path = d / "sweep.toml"
        path.write_text(sweep_text(dataset=synthetic(N_VIDEOS), judge=openai_judge(server.base_url)))
        run = sweep(path, d / "out")
        assert run.returncode == exitcodes.OK, run
        assert server.stats()["requests"] == N_ITEMS
    return _results(d / "out")


def test_judge_down_then_up_rerun_completes_the_cell(reference, tmp_path, sweep_file):
    port = free_port()
    path = sweep_file(sweep_text(dataset=synthetic(N_VIDEOS), judge=openai_judge(f"http://127.0.0.1:{port}/v1")))
    out = tmp_path / "out"
    down = sweep(path, out)
    assert down.returncode == exitcodes.FAILURES, down
    verdicts = read_store(out / "verdicts")
    assert verdicts.height == N_ITEMS and set(verdicts["item_status"]) == {"judge_error"}
    assert verdicts["retryable"].all()
    assert set(read_store(out / "metrics")["cell_status"]) == {"incomplete"}
    assert "judge_error" in down.stdout and "rerun" in down.stdout

    with AppServer(make_app(FaultConfig()), port=port) as server:
        up = sweep(path, out)
        assert up.returncode == exitcodes.OK, up
        assert server.stats()["requests"] == N_ITEMS  # exactly the failed requests; captions came from the store
    assert "0 new" in up.stdout  # no caption redone
    assert set(read_store(out / "verdicts")["item_status"]) == {"ok"}
    assert set(read_store(out / "metrics")["cell_status"]) == {"complete"}
    assert _results(out).equals(reference)
    assert_no_duplicates(out)


@pytest.mark.slow
def test_accept_failures_finishes_the_cell_and_says_so(tmp_path, sweep_file):
    path = sweep_file(sweep_text(dataset=synthetic(N_VIDEOS),
                                 judge=openai_judge(f"http://127.0.0.1:{free_port()}/v1")))
    out = tmp_path / "out"
    run = sweep(path, out, "--accept-failures", "--max-failure-share", "1")
    assert run.returncode == exitcodes.OK, run  # within the allowed share
    assert set(read_store(out / "metrics")["cell_status"]) == {"failures_accepted"}
    assert set(pl.read_parquet(out / "results.parquet")["cell_status"]) == {"failures_accepted"}
    again = sweep(path, out)
    assert "1 cached (skipped), 0 to run" in again.stderr and again.returncode == exitcodes.FAILURES


@pytest.mark.slow
def test_thirty_percent_injected_faults_lose_nothing(reference, tmp_path, sweep_file):
    cfg = FaultConfig(rate=0.3, retry_after_s=0, stall_s=3.0, max_faults_per_request=1, seed=3)
    with AppServer(make_app(cfg)) as server:
        path = sweep_file(sweep_text(dataset=synthetic(N_VIDEOS),
                                     judge=openai_judge(server.base_url, max_attempts=3, timeout_s=1.0)))
        run = sweep(path, tmp_path / "out")
        stats = server.stats()
    assert run.returncode == exitcodes.OK, run
    assert sum(v for k, v in stats["outcomes"].items() if k != "ok") > 0  # faults really happened
    assert _results(tmp_path / "out").equals(reference)


def test_refused_authentication_stops_the_run(tmp_path, sweep_file):
    from aiohttp import web

    seen = {"n": 0}

    async def refuse(request):
        seen["n"] += 1
        return web.json_response({"error": {"message": "invalid api key"}}, status=401)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", refuse)
    with AppServer(app) as server:
        path = sweep_file(sweep_text(dataset=synthetic(3), judge=openai_judge(server.base_url, max_in_flight=2)))
        run = sweep(path, tmp_path / "out")
    assert run.returncode == exitcodes.ABORTED, run
    assert "401" in run.stderr or "auth" in run.stderr.lower()
    assert "Traceback" not in run.stderr
    assert seen["n"] < 3 * ITEMS_PER_VIDEO  # stopped early, not once per request
