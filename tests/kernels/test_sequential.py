"""kernels/sequential.py: the without-replacement normal-mixture confidence sequence covers the population mean at
every time at once (time-uniform, not just at one t) on simulated populations, and the per-video linearisation of a
ratio is the documented one.

Coverage is measured over 1,000 random orders of a fixed population; the asserted floor is 1 - alpha - 0.02 (0.02
is about three binomial standard errors at 1,000 repetitions). The sequence is asymptotic, so the check starts at
t = 20 videos (adaptive sweeps decide only after `min_videos`, 100 by default)."""

from __future__ import annotations

import numpy as np

from capeval.kernels.sequential import linearise, numeric_gradient, wor_mixture_cs

ALPHA = 0.05
REPS = 1000
TOLERANCE = 0.02


def _paired_share_differences(n: int, rng) -> np.ndarray:
    """Per-video differences of two systems' shares of correct items (x 100), items 4-16 per video, a shared
    per-video difficulty and a small true effect: the values an adaptive sweep's pairs are made of."""
    k = rng.integers(4, 17, n)
    u = rng.normal(0.0, 1.0, n)
    pa, pb = 1 / (1 + np.exp(-(0.3 + u))), 1 / (1 + np.exp(-(0.2 + u)))
    return 100.0 * (rng.binomial(k, pa) - rng.binomial(k, pb)) / k


def _first_miss_rate(population: np.ndarray, prior_var: float, t_from: int, rng) -> tuple[float, np.ndarray]:
    n = population.size
    orders = np.stack([population[rng.permutation(n)] for _ in range(REPS)])
    _, low, high = wor_mixture_cs(orders, n, alpha=ALPHA, prior_var=prior_var)
    mu = population.mean()
    miss = ((low > mu + 1e-9) | (high < mu - 1e-9))[:, t_from - 1:]
    return float(miss.any(axis=1).mean()), high - low


def test_time_uniform_coverage_of_paired_share_differences():
    rng = np.random.default_rng(7)
    population = _paired_share_differences(1500, rng)
    miss, width = _first_miss_rate(population, prior_var=100.0 ** 2, t_from=20, rng=rng)
    assert 1 - miss >= 1 - ALPHA - TOLERANCE, f"time-uniform coverage {1 - miss:.3f}"
    # and it is an interval that learns: narrower with more videos, far narrower near the whole population
    w = width.mean(axis=0)
    assert w[99] < w[19] and w[999] < w[99] / 3 and w[-2] < w[999] / 2


def test_time_uniform_coverage_of_a_bounded_skewed_population():
    rng = np.random.default_rng(11)
    population = rng.beta(0.5, 3.0, 1000)  # in [0, 1], skewed towards 0
    miss, _ = _first_miss_rate(population, prior_var=0.25, t_from=20, rng=rng)
    assert 1 - miss >= 1 - ALPHA - TOLERANCE, f"time-uniform coverage {1 - miss:.3f}"


def test_a_fixed_t_interval_read_after_every_round_would_not_cover():
    """What the sequence is for: the 95% normal interval at each t, read at every t, misses far more than 5% of the
    time; the sequence on the same orders does not."""
    rng = np.random.default_rng(3)
    population = _paired_share_differences(1500, rng)
    n, mu = population.size, population.mean()
    orders = np.stack([population[rng.permutation(n)] for _ in range(REPS)])
    t = np.arange(1, n + 1)
    mean = np.cumsum(orders, axis=1) / t
    sd = np.sqrt(np.maximum(np.cumsum(orders ** 2, axis=1) / t - mean ** 2, 0.0))
    fpc = np.sqrt(np.maximum(n - t, 0) / (n - 1))  # the finite-population correction: the fixed-t interval's best
    naive_miss = (np.abs(mean - mu) > 1.96 * sd / np.sqrt(t) * fpc)[:, 19:-1].any(axis=1).mean()
    _, low, high = wor_mixture_cs(orders, n, alpha=ALPHA, prior_var=100.0 ** 2)
    seq_miss = ((low > mu) | (high < mu))[:, 19:].any(axis=1).mean()
    assert naive_miss > 3 * ALPHA and seq_miss <= ALPHA + TOLERANCE


def test_without_replacement_reaches_the_iid_sequence_for_a_huge_population():
    rng = np.random.default_rng(5)
    x = rng.normal(0.0, 1.0, 300)
    est_big, low_big, high_big = wor_mixture_cs(x, 10 ** 12, alpha=ALPHA, t_star=75)
    t = np.arange(1, 301)
    assert np.allclose(est_big, np.cumsum(x) / t)
    est_small, low_small, high_small = wor_mixture_cs(x, 300, alpha=ALPHA, t_star=75)
    assert np.all(high_small - low_small <= high_big - low_big + 1e-12)  # knowing N only narrows it
    assert low_small[-1] <= x.mean() <= high_small[-1]


def test_linearised_ratio_is_the_residual_of_the_running_ratio_over_the_mean_denominator():
    rng = np.random.default_rng(2)
    den = rng.integers(1, 20, 50).astype(float)
    num = rng.binomial(den.astype(int), 0.4).astype(float)
    stats = np.stack([num, den], axis=1)  # (videos, S)
    ratio = lambda s: s[..., 0] / s[..., 1]  # noqa: E731  a metric of summed statistics
    psi, value = linearise(ratio, stats, n_population=50)
    r = num.sum() / den.sum()
    assert value == r
    assert np.allclose(psi, r + (num - r * den) / den.mean())
    assert np.isclose(psi.mean(), r)  # over the whole population its mean is the ratio itself
    # from a sample: psi's mean over the POPULATION with the population's mean denominator is the ratio exactly
    sample = stats[:20]
    r_hat = sample[:, 0].sum() / sample[:, 1].sum()
    psi_pop = r_hat + (num - r_hat * den) / den.mean()
    assert np.isclose(psi_pop.mean(), r)


def test_numeric_gradient_of_a_vectorised_metric():
    f1 = lambda s: 2 * s[..., 0] / (s[..., 0] + s[..., 1] + s[..., 2])  # noqa: E731  F1-like, of counts
    point = np.array([30.0, 10.0, 20.0])
    g = numeric_gradient(f1, point)
    total = point.sum()
    exact = np.array([2 / total - 2 * point[0] / total ** 2, -2 * point[0] / total ** 2, -2 * point[0] / total ** 2])
    assert np.allclose(g, exact, rtol=1e-5)
