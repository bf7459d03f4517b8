"""Rank correlations against scipy.stats on data with many ties."""

import numpy as np
import pytest
from scipy import stats

from capeval.kernels.correlation import kendall_tau_b, kendall_tau_c, rank_average, spearman_rho


@pytest.mark.parametrize("n,levels", [(2, 2), (3, 2), (17, 3), (200, 5), (2000, 1000), (3001, 4)])
def test_matches_scipy_with_ties(n, levels):
    rng = np.random.default_rng(n)
    for trial in range(3):
        x = rng.integers(0, levels, n).astype(float)
        y = (x * (trial - 1) + rng.integers(0, levels, n)).astype(float)  # negative, none and positive association
        ref_b = stats.kendalltau(x, y, variant="b").statistic
        ref_c = stats.kendalltau(x, y, variant="c").statistic
        ref_s = stats.spearmanr(x, y).statistic
        np.testing.assert_allclose(kendall_tau_b(x, y), ref_b, rtol=1e-12, atol=1e-12, equal_nan=True)
        np.testing.assert_allclose(kendall_tau_c(x, y), ref_c, rtol=1e-12, atol=1e-12, equal_nan=True)
        np.testing.assert_allclose(spearman_rho(x, y), ref_s, rtol=1e-10, atol=1e-12, equal_nan=True)


def test_continuous_and_reversed():
    rng = np.random.default_rng(1)
    x = rng.normal(size=500)
    assert kendall_tau_b(x, x) == pytest.approx(1.0)
    assert kendall_tau_b(x, -x) == pytest.approx(-1.0)
    y = x + rng.normal(size=500)
    assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-12)


def test_undefined_cases_are_nan():
    for fn in (kendall_tau_b, kendall_tau_c, spearman_rho):
        assert np.isnan(fn([1.0], [2.0]))  # n = 1
        assert np.isnan(fn([], []))
        assert np.isnan(fn([1, 1, 1], [1, 2, 3]))  # constant x
        assert np.isnan(fn([1, 2, 3], [4, 4, 4]))  # constant y
        assert np.isnan(fn([1, np.nan, 3], [1, 2, 3]))
        with pytest.raises(ValueError, match="same length"):
            fn([1, 2], [1, 2, 3])


def test_average_ranks_match_rankdata():
    v = np.random.default_rng(2).integers(0, 6, 100)
    np.testing.assert_array_equal(rank_average(v), stats.rankdata(v, method="average"))
