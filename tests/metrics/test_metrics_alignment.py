"""Human-alignment helpers: correlations agree with scipy on tied data, Gwet's AC1 by hand, caption swaps."""

import numpy as np
import pytest
from scipy import stats

from capeval.engine.metrics.alignment import correlate, gwet_ac1, swap_caption


def test_correlations_match_scipy_with_ties():
    rng = np.random.default_rng(0)
    metric = rng.integers(1, 6, size=200).astype(float)  # many ties
    human = rng.integers(1, 6, size=(200, 3)).astype(float) + metric[:, None] * 0.5
    out = correlate(metric, human)
    mean_h = human.mean(axis=1)
    assert out["kendall_tau_b"] == pytest.approx(stats.kendalltau(metric, mean_h).statistic)
    assert out["kendall_tau_c"] == pytest.approx(stats.kendalltau(metric, mean_h, variant="c").statistic)
    assert out["spearman_rho"] == pytest.approx(stats.spearmanr(metric, mean_h).statistic)
    per = np.mean([stats.kendalltau(metric, human[:, a]).statistic for a in range(3)])
    assert out["kendall_tau_b_per_annotator"] == pytest.approx(per)
    assert out["n"] == 200


def test_tau_b_by_hand_on_a_tiny_tied_example():
    # x = [1, 2, 2, 3], y = [1, 1, 2, 3]: concordant 4, discordant 0, ties only in x 1, only in y 1
    out = correlate([1, 2, 2, 3], [1, 1, 2, 3])
    assert out["kendall_tau_b"] == pytest.approx(4 / np.sqrt(5 * 5))


def test_gwet_ac1_by_hand():
    # 4 items, 2 raters, categories {0, 1}; agreement on 3 items
    ratings = [[1, 1], [1, 1], [0, 0], [1, 0]]
    pa = 3 / 4
    pi1 = (1 + 1 + 0 + 0.5) / 4
    pe = 2 * pi1 * (1 - pi1) / 1
    assert gwet_ac1(ratings) == pytest.approx((pa - pe) / (1 - pe))
    assert gwet_ac1([[2, 2, 2], [1, 1, 1], [3, 3, np.nan]]) == pytest.approx(1.0)


def test_swap_caption_is_deterministic_and_keeps_case():
    caption = "A dog chases a ball. The Dog then jumps over the ball."
    swaps = {"dog": "cat", "ball": "frisbee", "jumps over": "walks around"}
    assert swap_caption(caption, swaps, seed=0) == "A cat chases a frisbee. The Cat then walks around the frisbee."
    one = swap_caption(caption, swaps, seed=3, n_swaps=1)
    assert one == swap_caption(caption, swaps, seed=3, n_swaps=1)
    assert sum(a != b for a, b in zip(one.split(), caption.split())) >= 1 and one != caption
    assert swap_caption("hotdog stand", {"dog": "cat"}, seed=0) == "hotdog stand"  # whole words only


def test_align_headline_is_the_per_annotator_mean_and_ci_resamples_videos():
    from capeval.engine.metrics.alignment import align

    rng = np.random.default_rng(2)
    videos = np.repeat(np.arange(40), 6)
    human = rng.integers(1, 6, size=(240, 3)).astype(float)
    metric = human.mean(axis=1) + rng.normal(0, 1.0, 240)
    out = align(metric, human, videos, n_resamples=200, seed=4)
    per = [stats.kendalltau(metric, human[:, a]).statistic for a in range(3)]
    assert out["tau_b"] == pytest.approx(np.mean(per))
    assert out["rho"] == pytest.approx(np.mean([stats.spearmanr(metric, human[:, a]).statistic for a in range(3)]))
    assert out["tau_b_mean_human"] == pytest.approx(stats.kendalltau(metric, human.mean(axis=1)).statistic)
    assert out["n"] == 240 and out["n_videos"] == 40
    lo, hi = out["ci"]["tau_b"]
    assert lo < out["tau_b"] < hi
    # resampling whole videos: with every video's rows identical across its 6 candidates the CI is as wide as
    # with 40 rows, not 240 (a row-level bootstrap would be ~sqrt(6) narrower)
    same = align(np.repeat(metric[::6], 6), np.repeat(human[::6], 6, axis=0), videos, n_resamples=200, seed=4)
    few = align(metric[::6], human[::6], np.arange(40), n_resamples=200, seed=4)
    width = lambda o: o["ci"]["tau_b"][1] - o["ci"]["tau_b"][0]  # noqa: E731
    assert width(same) == pytest.approx(width(few), rel=0.35)
    rounded = align(metric, human, videos, round4=True, n_resamples=0)
    assert rounded["tau_b"] == round(rounded["tau_b"], 4) and rounded["ci"] == {}
