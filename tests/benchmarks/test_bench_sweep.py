"""The sweep benchmark's machinery at a tiny size: both runs (overlapped, stage after stage) do the same work against
the lognormal loopback judge, and the JSON carries both wall times and their ratio (no timing is asserted)."""

from __future__ import annotations

from capeval.benchmarks.bench_sweep import sweep


def test_sweep_benchmark_runs_both_ways_on_the_same_work(ray_local):
    out = sweep(True, n_videos=3, repeats=1, caption_latency_s=0.01)
    assert out["cells"] == 4 and out["videos"] == 3
    assert out["captions"] == 3 * 4 and out["judge_requests"] > 0
    assert out["stage_after_stage_s"] > 0 and out["overlapped_s"] > 0
    assert abs(out["ratio"] - out["overlapped_s"] / out["stage_after_stage_s"]) < 0.005  # times are rounded
    assert out["target_ratio"] == 0.6 and out["runs_each"] == 1
