"""Protocols (or judges) held against each other (engine/metrics/across.py) on constructed verdict tables with known
answers: rank agreement of the systems (tau_b = 1 when two raters order them alike, -1 when reversed, with
intervals; the point value equal to scipy's tau_b of the protocols' own metrics), and length sensitivity (a
simulated effect of caption length recovered, and systems that differ only in length getting equal
length-controlled scores)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy.stats import kendalltau

from _verdicts import random_codes, verdict_rows
from capeval.engine.metrics.across import across_run
from capeval.engine.protocols.capquiz.metrics import compute_metrics as capquiz_metrics
from capeval.engine.protocols.vcinspector.metrics import compute_metrics as vci_metrics


def _system(i: int) -> dict:
    return {"captioner": "m", "prompt_id": f"p{i}", "frame_spec": "uniform:8"}


def _capquiz(n_systems: int, correct: list[float], n_videos: int = 40, judge: str = "local") -> pl.DataFrame:
    """CapQuiz rows (codes 0 cannot determine, 1 correct, 2 wrong): system i answers correctly with correct[i]."""
    return pl.concat([verdict_rows(_system(i), random_codes(n_videos, 4, [0.1, correct[i], 0.9 - correct[i]],
                                                            seed=10 + i), judge=judge) for i in range(n_systems)])


def _vcinspector(scores: list[int], n_videos: int = 40, noise: float = 0.0, seed: int = 0) -> pl.DataFrame:
    """VC-Inspector rows (code = score - 1), one item per video: system i scores scores[i] (a neighbour with
    probability `noise`)."""
    rng = np.random.default_rng(seed)
    frames = []
    for i, score in enumerate(scores):
        codes = np.clip(score - 1 + rng.choice([-1, 0, 1], size=n_videos, p=[noise / 2, 1 - noise, noise / 2]), 0, 4)
        frames.append(verdict_rows(_system(i), [[int(c)] for c in codes], protocol="vcinspector"))
    return pl.concat(frames)


@pytest.mark.parametrize("reverse", [False, True])
def test_two_protocols_ranking_systems_alike_or_reversed_give_tau_b_plus_or_minus_one(reverse):
    correct = [0.1, 0.3, 0.5, 0.7, 0.85]  # CapF1 rises with the system's index
    scores = [1, 2, 3, 4, 5][::-1 if reverse else 1]
    v = pl.concat([_capquiz(5, correct), _vcinspector(scores, noise=0.3)], how="diagonal_relaxed")
    out = across_run(v, across="protocols", n_resamples=400, seed=1).agreement
    assert out.height == 1
    r = out.row(0, named=True)
    assert (r["a"], r["b"], r["metric_a"], r["metric_b"]) == ("capquiz", "vcinspector", "CapF1", "mean_score")
    assert r["held"] == "judge=local" and r["n_systems"] == 5 and r["n_videos"] == 40
    sign = -1.0 if reverse else 1.0
    assert r["tau_b"] == sign and r["spearman"] == pytest.approx(sign)
    # an interval from the replicates, the point inside it, far from 0 for systems this far apart
    assert r["tau_b_low"] <= r["tau_b"] <= r["tau_b_high"]
    if reverse:
        assert r["tau_b_low"] == -1.0 and r["tau_b_high"] <= -0.6
    else:
        assert r["tau_b_high"] == 1.0 and r["tau_b_low"] >= 0.6


def test_tau_b_is_that_of_the_protocols_own_metrics_and_its_interval_widens_with_fewer_videos():
    """Six systems in no particular order: tau_b equals scipy's of the two protocols' own CapF1 and mean score."""
    rng = np.random.default_rng(7)
    correct = list(rng.uniform(0.2, 0.8, 6))
    scores = [int(s) for s in rng.integers(1, 6, 6)]
    v = pl.concat([_capquiz(6, correct), _vcinspector(scores, noise=0.6, seed=3)], how="diagonal_relaxed")
    r = across_run(v, n_resamples=300).agreement.row(0, named=True)
    f1 = capquiz_metrics(v.filter(pl.col("protocol") == "capquiz").drop("dataset", "protocol_name"), n_resamples=0)
    f1 = f1.filter((pl.col("family") == "all") & (pl.col("question_type") == "all") & (pl.col("metric") == "CapF1"))
    ms = vci_metrics(v.filter(pl.col("protocol") == "vcinspector").drop("dataset", "protocol_name"), n_resamples=0)
    ms = ms.filter(pl.col("metric") == "mean_score")
    a = dict(zip(f1["prompt_id"], f1["value"]))
    b = dict(zip(ms["prompt_id"], ms["value"]))
    expected = kendalltau([a[k] for k in sorted(a)], [b[k] for k in sorted(a)], variant="b").statistic
    assert r["tau_b"] == pytest.approx(expected)
    few = across_run(v.filter(pl.col("video_id") < "v010"), n_resamples=300).agreement.row(0, named=True)
    assert few["n_videos"] == 10 and "10 shared videos" in few["warning"]
    assert few["tau_b_high"] - few["tau_b_low"] > r["tau_b_high"] - r["tau_b_low"]


def test_across_judges_pairs_two_judges_of_one_protocol():
    correct = [0.1, 0.3, 0.5, 0.7]
    v = pl.concat([_capquiz(4, correct, judge="judge-a"), _capquiz(4, correct[::-1], judge="judge-b")])
    out = across_run(v, across="judges", n_resamples=200).agreement
    r = out.row(0, named=True)
    assert out.height == 1 and (r["a"], r["b"], r["held"]) == ("judge-a", "judge-b", "protocol=capquiz")
    assert r["tau_b"] == -1.0 and r["tau_b_low"] <= -1.0 + 1e-12
    assert "4 systems: tau_b takes few values" in r["warning"]
    # across protocols there is nothing to hold against (one protocol per judge)
    assert across_run(v, across="protocols", n_resamples=50).agreement.is_empty()


def _length_run(beta: float, medians=(20, 40, 80), n_videos: int = 400, seed: int = 5):
    """VC-Inspector verdicts whose scores depend on caption length only: each caption of system s has
    words = median_s * 2**N(0, 0.7); each of its 4 items scores 4 with probability 0.5 + beta/2 * log2(words / 40),
    else 2. So the per-caption mean score is 3 + beta * log2(words / 40): beta points per doubling, 3 at 40 words
    for every system."""
    rng = np.random.default_rng(seed)
    frames, captions = [], []
    for s, median in enumerate(medians):
        words = np.maximum(3, np.round(median * 2.0 ** rng.normal(0.0, 0.7, n_videos))).astype(int)
        p = np.clip(0.5 + beta / 2 * np.log2(words / 40), 0.0, 1.0)
        codes = np.where(rng.random((n_videos, 4)) < p[:, None], 3, 1)
        frames.append(verdict_rows(_system(s), codes.tolist(), protocol="vcinspector"))
        captions += [{**_system(s), "video_id": f"v{v:03d}", "text": " ".join(["word"] * int(w))}
                     for v, w in enumerate(words)]
    return pl.concat(frames), pl.DataFrame(captions)


@pytest.mark.parametrize("beta", [0.2, -0.15])
def test_a_simulated_length_effect_is_recovered_and_controlled_scores_remove_it(beta):
    v, captions = _length_run(beta)
    res = across_run(v, captions, n_resamples=300, reference_words=40, seed=2)
    fit = res.length.row(0, named=True)
    assert res.length.height == 1 and fit["metric"] == "mean_score" and fit["n_captions"] == 3 * 400
    assert fit["slope_item"] == pytest.approx(beta, abs=0.05)
    assert fit["slope_item_low"] <= beta <= fit["slope_item_high"]
    assert np.sign(fit["partial_r_item"]) == np.sign(beta) and np.sign(fit["slope_system"]) == np.sign(beta)
    ctl = res.controlled.sort("prompt_id")
    assert ctl["reference_words"].to_list() == [40.0] * 3
    # the raw scores differ by about beta per doubling (medians 20, 40, 80); the controlled ones do not
    raw = ctl["value"].to_numpy()
    assert np.sign(raw[2] - raw[0]) == np.sign(beta) and abs(raw[2] - raw[0]) > abs(beta)
    controlled = ctl["controlled"].to_numpy()
    assert np.ptp(controlled) < 0.1 and controlled == pytest.approx([3.0] * 3, abs=0.08)
    assert (ctl["controlled_low"] <= ctl["controlled"]).all() and (ctl["controlled"] <= ctl["controlled_high"]).all()
    assert ctl["words"].to_list() == pytest.approx([20, 40, 80], rel=0.1)  # geometric means of the lengths


def test_default_reference_length_is_the_median_judged_caption_and_no_captions_means_no_length_rows():
    v, captions = _length_run(0.2, n_videos=60)
    words = captions["text"].str.split(" ").list.len()
    res = across_run(v, captions, n_resamples=50)
    assert res.reference_words == float(words.median())
    assert set(res.controlled["reference_words"]) == {float(words.median())}
    bare = across_run(v, None, n_resamples=50)
    assert bare.length.is_empty() and bare.controlled.is_empty() and bare.reference_words is None
    assert any("no caption texts" in n for n in bare.notes)


def test_no_length_variation_within_systems_leaves_the_slope_undefined():
    v, captions = _length_run(0.2, n_videos=30)
    fixed = captions.with_columns(pl.when(pl.col("prompt_id") == "p0").then(pl.lit("a b c")).otherwise(
        pl.lit("a b c d e f")).alias("text"))
    res = across_run(v, fixed, n_resamples=50)
    fit = res.length.row(0, named=True)
    assert fit["slope_item"] is None and "no length variation within a system" in fit["warning"]
    assert res.controlled["controlled"].null_count() == res.controlled.height
