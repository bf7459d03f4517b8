"""`capeval bench judge --judge openai ...` against the loopback server: real CAPability requests (release files read
in place), per-level numbers that match what the server saw, the judgment cache bypassed, cost from token counts,
errors counted, 401 aborts, and a sweep projection."""

from __future__ import annotations

import json

import pytest
from _sweeps import write_sweep

from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
from capeval.engine import exitcodes
from capeval.engine.cli import main as capeval


def _bench(capsys, base_url, shared_data, *extra, model="loopback"):
    argv = ["bench", "judge", "--judge", "openai", "--base-url", base_url, "--judge-model", model,
            "--protocol", "capability", "--items", str(shared_data / "capability/annotations/object_color.jsonl"),
            "--captions", str(shared_data / "capability/captions/gpt-4o-0806"), "--json", *extra]
    rc = capeval(argv)
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else None), out.err


def test_levels_match_the_server_and_bypass_the_cache(capsys, shared_data):
    cfg = FaultConfig(cache_mode="prefix", latency_median_s=0.01, latency_sigma=0.5, seed=1)
    with LoopbackServer(cfg) as server:
        args = ("--requests", "40", "--warmup", "2", "--concurrency", "4,16", "--price-prompt", "2",
                "--price-cached", "0.5", "--price-completion", "8")
        rc, result, err = _bench(capsys, server.base_url, shared_data, *args)
        assert rc == 0, err
        first = server.stats()
        rc, again, err = _bench(capsys, server.base_url, shared_data, *args)
        assert rc == 0, err
        second = server.stats()
    levels = result["levels"]
    assert [lv["concurrency"] for lv in levels] == [4, 16]
    assert first["requests"] == 2 * (40 + 2)  # every request reached the server
    assert second["requests"] == 2 * first["requests"]  # a rerun sends them all again: no cache in the way
    assert first["max_in_flight"] <= 16
    assert result["workload"]["disjoint_slices"] and result["workload"]["available_requests"] >= 84
    for lv in levels:
        assert lv["requests"] == 40 and lv["errors"] == 0 and lv["error_share"] == 0.0
        assert 0 < lv["latency_p50_s"] <= lv["latency_p95_s"] <= lv["latency_p99_s"]
        assert lv["requests_per_s"] == pytest.approx(40 / lv["wall_s"], rel=0.02)
        assert lv["prompt_tokens_per_s"] == pytest.approx(lv["prompt_tokens"] / lv["wall_s"], rel=0.02)
        # CAPability prompts share their instructions: the server's prefix cache serves part of every prompt
        assert 0.05 < lv["cached_prompt_share"] < 1
        assert lv["cached_prompt_share"] == pytest.approx(lv["cached_prompt_tokens"] / lv["prompt_tokens"], abs=1e-4)
        expected = ((lv["prompt_tokens"] - lv["cached_prompt_tokens"]) * 2 + lv["cached_prompt_tokens"] * 0.5
                    + lv["completion_tokens"] * 8) / 1e6
        assert lv["cost_usd"] == pytest.approx(expected, rel=1e-4)
    # more in flight against a server with ~10 ms latency: more requests per second
    assert levels[1]["requests_per_s"] > levels[0]["requests_per_s"]


def test_errors_are_counted_and_auth_failure_aborts(capsys, shared_data):
    with LoopbackServer(FaultConfig(rate=0.5, kinds=("500",), max_faults_per_request=5, seed=2)) as server:
        rc, result, err = _bench(capsys, server.base_url, shared_data, "--requests", "30", "--warmup", "0",
                                 "--concurrency", "8", "--judge-option", "max_attempts=1")
    assert rc == 0, err
    lv = result["levels"][0]
    assert 0.2 < lv["error_share"] < 0.8 and lv["errors"] == round(lv["error_share"] * 30)
    assert "HTTP 500" in lv["first_error"]
    with LoopbackServer(FaultConfig(api_key="secret")) as server:
        rc, _, err = _bench(capsys, server.base_url, shared_data, "--requests", "30", "--concurrency", "8")
        assert (server.stats()["model_lists"], server.stats()["requests"]) == (1, 0)  # the key's probe, then nothing
    assert rc == exitcodes.ABORTED
    error_lines = [line for line in err.splitlines() if line.startswith("capeval bench: aborted:")]
    assert len(error_lines) == 1 and "HTTP 401" in error_lines[0] and "Traceback" not in err


def test_sweep_projection_prices_each_judge_with_its_own_prices(capsys, shared_data, tmp_path, monkeypatch):
    """Two judges in the sweep: the measured one (the loopback endpoint, priced by the --price-* flags) and another
    with its own prices in the sweep file. Each judge's requests are priced with its own prices (they were all put
    on the measured judge's price before), and only the measured judge gets a wall time at the measured rate."""
    from capeval.engine.sweep.config import load_sweep
    from capeval.engine.sweep.datasets import load_dataset
    from capeval.engine.sweep.grid import caption_cells
    from capeval.engine.sweep.prices import Prices

    monkeypatch.chdir(tmp_path)
    with LoopbackServer(FaultConfig(latency_median_s=0.005)) as server:
        measured = {"name": "openai", "seeds": [0, 1], "params": {"base_url": server.base_url, "model": "loopback",
                                                                  "api_key": "test-key", "structured": "vllm"}}
        other = {"name": "local", "prices": {"input": 3.0, "output": 6.0}}
        sweep = write_sweep(tmp_path / "sweep.toml", "p", frames=("uniform:2", "uniform:4", "uniform:8"),
                            n_videos=3, duration_s=None, judges=[measured, other])
        rc, result, err = _bench(capsys, server.base_url, shared_data, "--requests", "20", "--warmup", "0",
                                 "--concurrency", "2,8", "--price-prompt", "1", "--price-completion", "2",
                                 "--sweep", str(sweep))
    assert rc == 0, err
    config = load_sweep(sweep)
    n_items = load_dataset(config.datasets[0], out_dir=tmp_path / "w", sweep_dir=tmp_path,
                           require_media=False).items.num_rows
    s = result["sweep"]
    assert s["caption_cells"] == len(caption_cells(config)) == 6
    openai, local = s["by_judge"]["openai"], s["by_judge"]["local"]
    assert openai["requests"] == 6 * n_items * 2 and local["requests"] == 6 * n_items  # cells x items x seeds
    assert s["first_step_requests"] == s["by_protocol"]["capquiz"] == openai["requests"] + local["requests"]
    assert openai["measured"] and not local["measured"]
    assert openai["prices_from"] == "--price-* flags" and local["prices_from"] == "sweep"
    # the same prompts per request (the seed is not in the text)
    assert openai["prompt_tokens"] / openai["requests"] == pytest.approx(local["prompt_tokens"] / local["requests"])
    for pj, lv in zip(s["projection"], result["levels"]):
        o, x = pj["by_judge"]["openai"], pj["by_judge"]["local"]
        assert o["wall_s"] == pytest.approx(openai["requests"] / lv["requests_per_s"], rel=0.01, abs=0.002)
        assert x["wall_s"] is None and pj["wall_s"] == o["wall_s"]  # the other judge was not measured
        cached = round(openai["prompt_tokens"] * lv["cached_prompt_share"])
        assert o["cost_usd"] == pytest.approx(Prices(1.0, 2.0).cost(openai["prompt_tokens"], cached,
                                                                      openai["completion_tokens_typical"]), abs=1e-4)
        assert x["cost_usd"] == pytest.approx((3.0 * local["prompt_tokens"]
                                               + 6.0 * local["completion_tokens_typical"]) / 1e6, abs=1e-4)
        assert x["cost_usd"] > 2 * Prices(1.0, 2.0).cost(local["prompt_tokens"], 0, local["completion_tokens_typical"])
        assert pj["cost_usd"] == pytest.approx(o["cost_usd"] + x["cost_usd"], abs=2e-4)


@pytest.mark.vllm
def test_against_vllm_serve(capsys, shared_data, vllm_server):
    """The real `vllm serve` (tiny model, --enable-prompt-tokens-details): every request answered, token rates and
    the server's own cached-token counts reported."""
    rc, result, err = _bench(capsys, vllm_server.base_url, shared_data, "--requests", "6", "--warmup", "1",
                             "--concurrency", "2,4", "--seeds", "0,1", "--judge-option", "structured=vllm",
                             "--judge-option", "timeout_s=300", model=vllm_server.model)
    assert rc == 0, err
    for lv in result["levels"]:
        assert lv["requests"] == 6 and lv["errors"] == 0, lv.get("first_error")
        assert lv["prompt_tokens"] > 6 * 50 and lv["completion_tokens"] > 0
        # an item's second trial repeats its first prompt: vLLM serves it from its prefix cache and says so
        assert 0.2 < lv["cached_prompt_share"] < 1
