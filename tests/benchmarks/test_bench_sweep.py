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


def test_scale_section_writes_a_row_per_size_and_a_rerun_that_sends_nothing():
    from capeval.benchmarks.bench_sweep import SCALE_IN_FLIGHT, scale
    from capeval.benchmarks.targets import SWEEP, verdicts

    out = scale(sizes=(40, 120))
    rows = out["sizes"]
    assert [r["requests"] for r in rows] == [40, 120]
    for r in rows:
        assert set(r) == {"requests", "wall_s", "requests_per_s", "share", "peak_rss_mb",
                          "engine_cpu_ms_per_request", "files", "model_share", "model_share_unhedged",
                          "share_of_model"}
        assert r["wall_s"] > 0 and 0 < r["share"] and r["peak_rss_mb"] > 0 and r["engine_cpu_ms_per_request"] > 0
        assert abs(r["share"] - r["requests_per_s"] / out["bound_per_s"]) < 0.01
        # runs shorter than one window: hedging waits for a window of answers, so both models give the same share
        assert r["model_share"] == r["model_share_unhedged"] < 1
        assert abs(r["share_of_model"] - r["share"] / r["model_share"]) < 0.01
    # the run folder holds a constant number of files, not one per request or per answer
    assert rows[0]["files"] == rows[1]["files"] < 40
    # the rerun of the finished sweep sent nothing (the bench raises otherwise) and added no file
    assert out["rerun_s"] > 0 and out["first_s"] == rows[-1]["wall_s"]
    assert out["rerun_files"] == rows[-1]["files"]
    assert out["in_flight"] == SCALE_IN_FLIGHT == 512 and out["hedge"] == 3
    assert abs(out["bound_per_s"] - 512 / out["latency"]["mean_s"]) < 2
    found = {v.name: v.value for v in verdicts(SWEEP, {"scale": out})}
    assert found["scale.files added per 1,000 requests"] == 0
    assert all(v is not None for name, v in found.items() if name.startswith("scale."))
