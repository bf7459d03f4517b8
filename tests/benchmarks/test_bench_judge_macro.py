"""`capeval bench judge --json --quick` (the macro benchmark): the HTTP section against the loopback server, the
targets block, per-section wall times, the vLLM section's workload draw, its cached-share ceiling, and its uncached
baseline on the grouped engine (prefix-cache lookups skipped per request)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from capeval.benchmarks.bench_judge import SCORE_CHOICES, capability_workload, prefix_cache_ceiling
from capeval.benchmarks.targets import JUDGE, targets_met
from capeval.engine.cli import main as capeval


def test_http_section_json(capsys):
    rc = capeval(["bench", "judge", "--json", "--quick", "--only", "http"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    result = json.loads(out.out)  # stdout carries the JSON alone
    http = result["http"]
    assert http["errors"] == 0 and http["n_requests"] == 3000 and http["in_flight"] == 256
    assert 0 < http["client_cpu_ms_per_request"] < 5
    assert http["baseline_openai_sdk"]["errors"] == 0
    # the SDK baseline costs more client CPU per request than the lean path, on the same requests
    assert http["cpu_vs_sdk"] < 1
    met = result["targets_met"]
    assert met["http_client_cpu_ms_per_request<=0.35"] == (http["client_cpu_ms_per_request"] <= 0.35)
    assert met["vllm_grouped_speedup>=2"] is None and met["streaming_share>=0.95"] is None  # not run
    assert met["sweep_overlap_ratio<=0.6"] is None
    listed = {row["name"]: row for row in result["targets"]}  # the same verdicts, with value and target
    assert listed["http.client_cpu_ms_per_request"] == {
        "name": "http.client_cpu_ms_per_request", "target": "<= 0.35", "value": http["client_cpu_ms_per_request"],
        "met": met["http_client_cpu_ms_per_request<=0.35"], "quick_note": None}
    assert listed["vllm.speedup (grouped+cache vs shuffled)"]["met"] is None  # not run
    assert list(result["section_wall_s"]) == ["http"]  # only the sections that ran, each timed
    assert 0 < result["section_wall_s"]["http"] <= result["wall_s"]


def test_targets_from_numbers():
    result = {"streaming": {"share": 0.93}, "overhead": {"engine_cpu_ms_per_request": 0.25},
              "http": {"client_cpu_ms_per_request": 0.12},
              "vllm": {"speedup": 2.4, "grouped_prefix_cache": {"cached_share": 0.71}}, "sweep": {"ratio": 0.55}}
    assert targets_met(JUDGE, result) == {"streaming_share>=0.95": False, "engine_cpu_ms_per_request<=0.2": False,
                               "http_client_cpu_ms_per_request<=0.35": True, "vllm_grouped_speedup>=2": True,
                               "vllm_cached_share>=0.75": False, "sweep_overlap_ratio<=0.6": True}
    assert targets_met(JUDGE, {"vllm": {"note": "failed: no vLLM"}})["vllm_grouped_speedup>=2"] is None


def test_prefix_cache_ceiling_counts_whole_blocks_and_recomputes_the_last_token():
    a = list(range(10))
    b = a[:9] + [99]  # shares 9 tokens with a: two whole 4-token blocks
    c = list(a)  # equal to a: the third block is partial, so again two
    d = list(range(100, 108))
    e = list(d)  # equal to d (8 tokens, two whole blocks) but its last token is recomputed: one block
    f = [7] * 12  # nothing earlier shares its first block
    served = 0 + 8 + 8 + 0 + 4 + 0
    total = 10 + 10 + 10 + 8 + 8 + 12
    assert prefix_cache_ceiling([a, b, c, d, e, f], 4) == round(served / total, 4)
    assert prefix_cache_ceiling([a], 4) == 0.0 and prefix_cache_ceiling([], 4) == 0.0
    # a block matches only after all blocks before it matched: a shared middle block counts for nothing
    g = [50, 51, 52, 53] + a[4:8] + [60, 61]
    assert prefix_cache_ceiling([a, g], 4) == 0.0


def test_workload_draw_is_stable_and_groups_trials(shared_data):
    small, small_shuffled, _, spare = capability_workload(shared_data, 2, 3, spare_items=1)
    large, _, _, none = capability_workload(shared_data, 4, 3)
    assert large[: len(small)] == small  # --quick draws the first items of the same draw
    assert spare == large[6:9] and none == []  # the warm-up item is the next of the draw, never a measured one
    assert len(large) == 12 and len({r.key for r in large}) == 12
    assert sorted(r.key for r in small_shuffled) == sorted(r.key for r in small)
    for i in range(0, len(large), 3):  # one item's trials adjacent, seeds 0..2
        trials = large[i : i + 3]
        assert len({(r.meta["item_id"], r.task, r.user, r.system) for r in trials}) == 1
        assert [r.seed for r in trials] == [0, 1, 2]
    assert all(r.choices == SCORE_CHOICES and r.json_schema is None and r.max_tokens == 4 for r in large)


@pytest.mark.vllm
def test_skip_cache_reads_gives_an_uncached_baseline_on_the_same_engine(tiny_lm_dir, shared_data):
    from capeval.benchmarks.bench_judge import _bench_judge_class, _skips_cache_reads_per_request

    if not _skips_cache_reads_per_request():
        pytest.skip("this vLLM has no per-request skip_reading_prefix_cache (the two-engine baseline is used)")
    requests, _, _, _ = capability_workload(shared_data, 1, 2)
    first = replace(requests[0], key="first")
    judge = _bench_judge_class()(tiny_lm_dir, name="tiny-lm", max_model_len=2048, enable_prefix_caching=True,
                                 block_size=32)
    try:
        judge.judge([first])
        (cached,) = judge.judge([replace(first, key="again")])
        assert cached.error is None and cached.cached_prompt_tokens > 0  # the engine does serve the repeat
        judge.skip_cache_reads = True
        (skipped,) = judge.judge([replace(first, key="skipped")])
        assert skipped.error is None and skipped.cached_prompt_tokens == 0
        assert skipped.prompt_tokens == cached.prompt_tokens and skipped.text == cached.text
    finally:
        judge.close()
