"""Cluster bootstrap against a naive numpy bootstrap with the same resampling law."""

import numpy as np
import pytest

from capeval.kernels.bootstrap import (cluster_bootstrap, cluster_bootstrap_sums, paired_bootstrap_diff, percentile_ci,
                               resample_indices, resample_weights)


def test_sums_equal_naive_loop_over_the_drawn_clusters():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 20, (37, 6))
    indices = resample_indices(37, 300, seed=5)
    naive = np.stack([counts[idx].sum(axis=0) for idx in indices]).astype(float)  # draw clusters, sum rows
    np.testing.assert_array_equal(cluster_bootstrap_sums(counts, 300, seed=5), naive)
    weights = resample_weights(37, 300, seed=5)
    np.testing.assert_array_equal(weights, np.stack([np.bincount(i, minlength=37) for i in indices]))
    big = counts * 10**6  # beyond float32's exact range: the float64 path gives the same draws
    np.testing.assert_array_equal(cluster_bootstrap_sums(big, 300, seed=5), naive * 10**6)


def test_deterministic_and_chunk_independent():
    counts = np.random.default_rng(1).integers(0, 5, (50, 3))
    a = cluster_bootstrap(counts, None, 1000, seed=3, chunk=64)
    b = cluster_bootstrap(counts, None, 1000, seed=3, chunk=1000)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, cluster_bootstrap(counts, None, 1000, seed=4))
    np.testing.assert_array_equal(resample_weights(50, 10, 3, first=990), resample_weights(50, 1000, 3)[990:])


def test_strata_keep_their_size():
    strata = np.array([2, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    indices = resample_indices(10, 200, seed=0, strata=strata)
    for row in indices:
        assert np.array_equal(np.bincount(strata[row], minlength=3), np.bincount(strata))
    w = resample_weights(10, 200, 0, strata=strata)
    for s in range(3):
        assert (w[:, strata == s].sum(axis=1) == (strata == s).sum()).all()


def test_distribution_matches_numpy_bootstrap():
    rng = np.random.default_rng(2)
    sizes = rng.integers(1, 30, 80)
    hits = rng.binomial(sizes, rng.beta(2, 3, 80))
    counts = np.stack([hits, sizes - hits], axis=1)
    ours = cluster_bootstrap(counts, lambda s: s[:, 0] / s.sum(1), 4000, seed=0)
    draws = rng.integers(0, 80, (4000, 80))  # the same law with numpy's generator
    ref = hits[draws].sum(1) / sizes[draws].sum(1)
    assert ours.mean() == pytest.approx(ref.mean(), abs=0.005)
    assert ours.std() == pytest.approx(ref.std(), rel=0.08)


def test_percentile_ci_matches_numpy_and_ignores_nan():
    x = np.random.default_rng(3).normal(size=(999, 4))
    low, high = percentile_ci(x, 0.9)
    np.testing.assert_allclose(low, np.percentile(x, 5, axis=0))
    np.testing.assert_allclose(high, np.percentile(x, 95, axis=0))
    x[::3, 1] = np.nan
    x[:, 2] = np.nan
    low, high = percentile_ci(x, 0.9)
    np.testing.assert_allclose(low[1], np.percentile(x[~np.isnan(x[:, 1]), 1], 5))
    assert np.isnan(low[2]) and np.isnan(high[2])
    low, high = percentile_ci(x.T, 0.9, axis=1)
    assert low.shape == (4,)


def test_binomial_ci_covers_truth_in_most_seeds():
    p, n, covered = 0.3, 150, 0
    for seed in range(200):
        y = np.random.default_rng(seed).random(n) < p
        counts = np.stack([y, ~y], axis=1).astype(np.int64)  # one row per cluster
        samples = cluster_bootstrap(counts, lambda s: s[:, 0] / s.sum(1), 400, seed=seed)
        low, high = percentile_ci(samples)
        covered += low <= p <= high
    assert 0.88 <= covered / 200 <= 0.99


def test_one_cluster_and_zero_denominators():
    samples = cluster_bootstrap(np.array([[3, 1]]), lambda s: s[:, 0] / s.sum(1), 50, seed=0)
    assert (samples == 0.75).all()  # one cluster: every replicate draws it
    with np.errstate(invalid="ignore"):
        samples = cluster_bootstrap(np.array([[0, 0], [2, 2]]), lambda s: s[:, 0] / s.sum(1), 500, seed=0)
    assert np.isnan(samples).any() and (samples[~np.isnan(samples)] == 0.5).all()
    with pytest.raises(ValueError, match="zero clusters"):
        cluster_bootstrap(np.zeros((0, 2)), None, 10, 0)


def test_paired_diff_uses_the_same_draws():
    rng = np.random.default_rng(4)
    sizes = rng.integers(5, 15, 60)
    a_hits = rng.binomial(sizes, 0.6)
    b_hits = np.minimum(sizes, a_hits + rng.binomial(1, 0.5, 60))  # b = a plus a small, correlated gain
    a = np.stack([a_hits, sizes - a_hits], 1)
    b = np.stack([b_hits, sizes - b_hits], 1)

    def stat(c):
        return c[..., 0] / c.sum(-1)

    res = paired_bootstrap_diff(b, a, stat, n_resamples=2000, seed=1)
    idx = resample_indices(60, 2000, seed=1)
    naive = stat(b[idx].sum(1)) - stat(a[idx].sum(1))
    np.testing.assert_allclose(res.samples, naive, rtol=1e-12)
    assert res.estimate == pytest.approx(stat(b.sum(0)) - stat(a.sum(0)))
    assert 0 < res.ci_low < res.estimate < res.ci_high and res.p_value < 0.01
    # paired CI is narrower than treating the two models as independent samples
    ind = stat(b[resample_indices(60, 2000, seed=2)].sum(1)) - stat(a[idx].sum(1))
    assert res.samples.std() < 0.5 * ind.std()


def test_many_clusters_are_resampled_in_blocks_of_bounded_size():
    """Integer counts of many clusters (a sweep's videos) are resampled a few replicates at a time: the block's
    weight matrix stays within WEIGHT_BYTES (512 replicates of 50,000 clusters would be 100 MB), and the
    replicates are those of any other block height."""
    import tracemalloc

    from capeval.kernels.bootstrap import WEIGHT_BYTES

    counts = np.random.default_rng(4).integers(0, 3, (50_000, 3))
    cluster_bootstrap(counts[:10], None, 2, seed=0)  # the kernel loaded before memory is traced
    tracemalloc.start()
    try:
        samples = cluster_bootstrap(counts, None, 1000, seed=9)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * WEIGHT_BYTES, peak
    np.testing.assert_array_equal(samples[:40], cluster_bootstrap(counts, None, 40, seed=9, chunk=40))
