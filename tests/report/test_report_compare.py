"""Paired comparisons: the paired bootstrap over shared videos (checked against resampling by explicit draws with
the same seed), p-values, Holm, pair selection."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from _verdicts import random_codes, verdict_rows
from capeval.engine.protocols.capquiz.metrics import compute_metrics
from capeval.engine.report.compare import compare_run, holm, select_pairs
from capeval.kernels.bootstrap import percentile_ci, resample_indices

A = {"captioner": "m1", "prompt_id": "p", "frame_spec": "uniform:8"}
B = {"captioner": "m2", "prompt_id": "p", "frame_spec": "uniform:8"}
# capquiz codes: 0 cannot determine, 1 correct, 2 wrong
CODES_A = random_codes(30, 5, [0.2, 0.6, 0.2], seed=1)
CODES_B = random_codes(30, 5, [0.3, 0.4, 0.3], seed=2)


def _capp(counts):  # counts (..., 3) of codes 0/1/2
    return 100 * counts[..., 1] / (counts[..., 1] + counts[..., 2])


def test_difference_matches_metrics_and_explicit_resampling():
    v = pl.concat([verdict_rows(A, CODES_A), verdict_rows(B, CODES_B)])
    out = compare_run(v, n_resamples=500, seed=3)
    assert out.height == 3 and set(out["metric"]) == {"CapP", "CapR", "CapF1"}
    row = out.filter(pl.col("metric") == "CapP").row(0, named=True)
    # the point values are the protocol's own metrics
    m = compute_metrics(v.drop("dataset", "protocol_name"), n_resamples=0)
    overall = m.filter((pl.col("family") == "all") & (pl.col("metric") == "CapP"))
    val = dict(zip(overall["captioner"], overall["value"]))
    assert row["a_value"] == pytest.approx(val["m1"]) and row["b_value"] == pytest.approx(val["m2"])
    assert row["diff"] == pytest.approx(val["m1"] - val["m2"])
    # the CI: the same draws of videos for both systems, done the slow way with explicit indices
    ca = np.array([[sum(c == k for c in vid) for k in range(3)] for vid in CODES_A], dtype=float)
    cb = np.array([[sum(c == k for c in vid) for k in range(3)] for vid in CODES_B], dtype=float)
    idx = resample_indices(30, 500, seed=3)
    reps = np.array([_capp(ca[i].sum(0)) - _capp(cb[i].sum(0)) for i in idx])
    lo, hi = percentile_ci(reps)
    assert row["ci_low"] == pytest.approx(float(lo)) and row["ci_high"] == pytest.approx(float(hi))
    p = min(1.0, 2 * min((reps <= 0).mean(), (reps >= 0).mean()))
    assert row["p_value"] == pytest.approx(max(p, 1 / 500))
    assert row["n_videos"] == 30 and "shared videos" not in (row["warning"] or "")


def test_pairing_uses_shared_videos_and_identical_systems_do_not_differ():
    v = pl.concat([verdict_rows(A, CODES_A), verdict_rows(B, CODES_A[:12])])
    out = compare_run(v, n_resamples=300)
    assert set(out["n_videos"]) == {12}
    assert all("12 shared videos" in w for w in out["warning"])
    assert out["diff"].abs().max() == pytest.approx(0.0, abs=1e-12)  # same codes on the shared videos
    assert set(out["p_value"]) == {1.0}


def test_clear_difference_is_significant_after_holm():
    strong = [[1, 1, 1, 1, 2] for _ in range(40)]
    weak = [[1, 2, 2, 0, 2] for _ in range(40)]
    weak[0] = [1, 1, 2, 0, 2]
    v = pl.concat([verdict_rows(A, strong), verdict_rows(B, weak)])
    out = compare_run(v, n_resamples=1000)
    capp = out.filter(pl.col("metric") == "CapP").row(0, named=True)
    assert capp["diff"] > 40 and capp["ci_low"] > 0 and capp["p_holm"] < 0.01


def test_holm():
    p = np.array([0.01, 0.04, 0.03, np.nan, 0.005])
    adj = holm(p)
    # sorted: 0.005*4, 0.01*3, 0.03*2, 0.04*1 -> 0.02, 0.03, 0.06, max(0.06, 0.04)
    assert adj[4] == pytest.approx(0.02) and adj[0] == pytest.approx(0.03)
    assert adj[2] == pytest.approx(0.06) and adj[1] == pytest.approx(0.06) and np.isnan(adj[3])


def test_pair_selection():
    systems = pl.DataFrame([{"dataset": "d", "protocol": "capquiz", "judge": "j", "captioner": c, "prompt_id": p,
                             "frame_spec": f, "protocol_name": "capquiz"}
                            for c in ("m1", "m2") for p in ("p1", "p2") for f in ("uniform:2", "uniform:8")])
    pairs = select_pairs(systems)
    assert len(pairs) == 12  # 8 systems, 3 factors, each system has 3 one-factor neighbours: 8 * 3 / 2
    assert all(len(d.split(",")) == 1 for _, _, d in pairs)
    assert len(select_pairs(systems, all_pairs=True)) == 28
    ab = select_pairs(systems, a="captioner=m1", b="captioner=m2")
    assert len(ab) == 4 and all(x["prompt_id"] == y["prompt_id"] and x["frame_spec"] == y["frame_spec"]
                                and x["captioner"] == "m1" for x, y, _ in ab)
    one_side = select_pairs(systems, a="prompt_id=p1")
    assert len(one_side) == 4 and all(x["prompt_id"] == "p1" and y["prompt_id"] == "p2" for x, y, _ in one_side)
    bare = select_pairs(systems, a="p1", b="p2")
    assert len(bare) == 4 and all(d == "prompt_id" for _, _, d in bare)


def test_capability_average_over_tasks_skips_an_undefined_task():
    # code 0 miss, 1 positive, 2 negative: task "t2" has only misses for m2 -> its precision is undefined there
    rows = [verdict_rows(A, [[1, 2, 1]] * 25, protocol="capability", task="t1"),
            verdict_rows(A, [[1, 1, 0]] * 25, protocol="capability", task="t2"),
            verdict_rows(B, [[1, 2, 2]] * 25, protocol="capability", task="t1"),
            verdict_rows(B, [[0, 0, 0]] * 25, protocol="capability", task="t2")]
    v = pl.concat(rows).with_columns(pl.concat_str([pl.col("task"), pl.col("item_id")]).alias("item_id"))
    out = compare_run(v, n_resamples=200)
    prec = out.filter(pl.col("metric") == "precision").row(0, named=True)
    # m1: mean(2/3, 1) = 83.3; m2: t1 only (t2 undefined) = 1/3
    assert prec["a_value"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert prec["b_value"] == pytest.approx(100 / 3)


def test_compare_cli_on_one_verdict_table(tmp_path, capsys):
    from capeval.engine.cli import main

    path = tmp_path / "verdicts.parquet"
    pl.concat([verdict_rows(A, CODES_A), verdict_rows(B, CODES_B)]).drop("dataset", "protocol_name").write_parquet(path)
    assert main(["compare", str(path), "--resamples", "200", "--out", str(tmp_path / "diff.csv")]) == 0
    text = capsys.readouterr().out
    assert "a = m1  vs  b = m2" in text and "Holm" in text
    assert pl.read_csv(tmp_path / "diff.csv").height == 3
    assert main(["compare", str(path), "--a", "captioner=nobody"]) == 2  # a selector that matches nothing


@pytest.mark.parametrize("paper", [False, True])
def test_lvcap_values_are_the_protocols_own(paper):
    """S_e / S_s of each side equal lvcap's compute_metrics (per-video event ratios, scene answers)."""
    from capeval.engine.protocols.lvcap.metrics import compute_metrics as lvcap_metrics

    rng = np.random.default_rng(5)
    frames = []
    for system in (A, B):
        for step, n, p in (("entail_p", 4, [0.3, 0.6, 0.1]), ("entail_r", 5, [0.4, 0.5, 0.1]),
                           ("scene", 3, [0.4, 0.6])):
            codes = rng.choice(len(p), size=(25, n), p=p)
            codes[rng.random(codes.shape) < 0.05] = -1  # some judgments failed
            rows = verdict_rows(system, codes.tolist(), protocol="lvcap", task=step)
            frames.append(rows.with_columns(pl.lit(step).alias("step")))
    v = pl.concat(frames).with_columns(pl.concat_str([pl.col("task"), pl.col("item_id")]).alias("item_id"))
    out = compare_run(v, n_resamples=100, modes={"lvcap": "paper" if paper else "strict"})
    own = lvcap_metrics(v.drop("dataset", "protocol_name"), n_resamples=0, paper_compatible=paper)
    own = own.filter(pl.col("bucket") == "all")
    for metric in ("S_e", "S_s"):
        row = out.filter(pl.col("metric") == metric).row(0, named=True)
        val = dict(zip(own.filter(pl.col("metric") == metric)["captioner"],
                       own.filter(pl.col("metric") == metric)["value"]))
        assert row["a_value"] == pytest.approx(val["m1"]) and row["b_value"] == pytest.approx(val["m2"])


@pytest.mark.parametrize("protocol,n_codes,metrics,where", [
    ("vidcapbench", 4, ("Acc", "Pre", "Cov"), {"dimension": "all", "consistency": "all"}),
    ("vcinspector", 5, ("mean_score",), {"category": "all"}),
])
def test_code_protocol_values_are_the_protocols_own(protocol, n_codes, metrics, where):
    import importlib

    own_metrics = importlib.import_module(f"capeval.engine.protocols.{protocol}.metrics").compute_metrics
    rng = np.random.default_rng(3)
    frames = []
    for system in (A, B):
        codes = rng.choice(n_codes, size=(25, 4)).tolist()
        frames.append(verdict_rows(system, codes, protocol=protocol).with_columns(pl.lit("score").alias("step")))
    v = pl.concat(frames)
    out = compare_run(v, n_resamples=100)
    own = own_metrics(v.drop("dataset", "protocol_name"), n_resamples=0)
    for col, value in where.items():
        own = own.filter(pl.col(col) == value)
    for metric in metrics:
        row = out.filter(pl.col("metric") == metric).row(0, named=True)
        sel = own.filter(pl.col("metric") == metric)
        val = dict(zip(sel["captioner"], sel["value"]))
        assert row["a_value"] == pytest.approx(val["m1"]) and row["b_value"] == pytest.approx(val["m2"])
