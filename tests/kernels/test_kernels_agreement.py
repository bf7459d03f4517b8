"""Gwet's AC1 and Cohen's kappa against a worked example, sklearn and a loop reference."""

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from capeval.kernels.agreement import category_counts, cohen_kappa, gwet_ac1


def _paired_ratings(table):
    """2 raters from a 2x2 contingency table [[A+B+, A+B-], [A-B+, A-B-]] (+ = code 0)."""
    rows = [(a, b) for a in range(2) for b in range(2) for _ in range(table[a][b])]
    return np.array(rows)


def test_gwet_2008_high_agreement_paradox():
    # Gwet (2008, Brit. J. Math. Stat. Psych. 61:29-48) discusses 2 raters on 125 subjects with 118 joint "+",
    # 5 (+,-), 2 (-,+), 0 joint "-": 94.4% agreement but kappa < 0. Worked by hand:
    # pa = 118/125; pi+ = (123/125 + 120/125) / 2 = 0.972; pe(AC1) = 2 * 0.972 * 0.028 / (2 - 1) = 0.054432
    # AC1 = (0.944 - 0.054432) / (1 - 0.054432) = 0.940776...;
    # pe(kappa) = 0.984 * 0.96 + 0.016 * 0.04 = 0.94528, kappa = (0.944 - 0.94528) / 0.05472 = -0.023392
    ratings = _paired_ratings([[118, 5], [2, 0]])
    assert gwet_ac1(ratings) == pytest.approx((0.944 - 0.054432) / (1 - 0.054432), abs=1e-12)
    assert cohen_kappa(ratings[:, 0], ratings[:, 1]) == pytest.approx((0.944 - 0.94528) / 0.05472, abs=1e-12)


def _ac1_loop(ratings, q):
    pa_terms, pi_sum, n_rated = [], np.zeros(q), 0
    for row in ratings:
        obs = [r for r in row if r >= 0]
        if not obs:
            continue
        n_rated += 1
        counts = np.bincount(obs, minlength=q)
        pi_sum += counts / len(obs)
        if len(obs) >= 2:
            pa_terms.append(sum(c * (c - 1) for c in counts) / (len(obs) * (len(obs) - 1)))
    pi = pi_sum / n_rated
    pe = sum(p * (1 - p) for p in pi) / (q - 1)
    return (np.mean(pa_terms) - pe) / (1 - pe)


def test_ac1_many_raters_with_missing_matches_loop():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 4, 60)
    ratings = np.where(rng.random((60, 5)) < 0.7, truth[:, None], rng.integers(0, 4, (60, 5)))
    ratings[rng.random((60, 5)) < 0.2] = -1  # missing ratings
    ratings[3] = -1  # an item nobody rated
    ratings[4, 1:] = -1  # an item rated once
    assert gwet_ac1(ratings, n_categories=4) == pytest.approx(_ac1_loop(ratings, 4), abs=1e-12)
    assert category_counts(ratings, 4).sum() == (ratings >= 0).sum()


def test_kappa_matches_sklearn():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 3, 400)
    b = np.where(rng.random(400) < 0.6, a, rng.integers(0, 3, 400))
    assert cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    b_missing = b.copy()
    b_missing[:50] = -1
    assert cohen_kappa(a, b_missing) == pytest.approx(cohen_kappa_score(a[50:], b[50:]), abs=1e-12)


def test_degenerate_inputs():
    assert np.isnan(gwet_ac1(np.array([[0, -1], [1, -1]])))  # nobody rated twice
    assert np.isnan(gwet_ac1(np.zeros((5, 2), dtype=int)))  # one category used
    assert gwet_ac1(np.zeros((5, 2), dtype=int), n_categories=2) == pytest.approx(1.0)
    assert np.isnan(cohen_kappa([0, 0], [0, 0]))
    assert np.isnan(cohen_kappa([-1], [0]))
    with pytest.raises(ValueError, match="items x raters"):
        gwet_ac1([0, 1, 2])
