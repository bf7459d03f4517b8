"""Two-stage bootstrap (kernels/two_stage.py): its draws against the video bootstrap and a naive nested loop, the
judge-noise variance against its closed form, and the one-trial case against capeval.kernels.bootstrap exactly."""

import numpy as np
import pytest

from capeval.kernels.bootstrap import cluster_bootstrap, resample_indices, resample_weights
from capeval.kernels.two_stage import judge_noise, two_stage_bootstrap, two_stage_weights, unit_layout


def _units(rng, trials_per_video, n_cols=2, high=9):
    """(unit counts (U, n_cols), unit -> video, per-video counts) with units listed in a shuffled order."""
    cluster = np.repeat(np.arange(len(trials_per_video)), trials_per_video)
    rng.shuffle(cluster)
    units = rng.integers(0, high, (cluster.size, n_cols))
    videos = np.zeros((len(trials_per_video), n_cols), dtype=units.dtype)
    np.add.at(videos, cluster, units)
    return units, cluster, videos


def ratio(s):
    return s[..., 0] / s.sum(-1)


def test_video_stage_is_the_cluster_bootstrap_exactly():
    rng = np.random.default_rng(0)
    units, cluster, videos = _units(rng, rng.integers(1, 5, 60))
    strata = rng.integers(0, 3, 60)
    for s in (None, strata):
        samples = two_stage_bootstrap(videos, units, cluster, ratio, 1500, seed=11, strata=s, chunk=128)
        np.testing.assert_array_equal(samples.video, cluster_bootstrap(videos, ratio, 1500, seed=11, strata=s))
        assert not np.array_equal(samples.two_stage, samples.video)
        video_w, _ = two_stage_weights(cluster, 60, 40, seed=11, strata=s)
        np.testing.assert_array_equal(video_w, resample_weights(60, 40, 11, strata=s))


def test_trial_draws_follow_the_nested_law():
    """Per replicate and video: trial weights + video draws = how often each trial is drawn when each draw of the
    video draws its K trials with replacement; so they sum to 0 over a video, and their mean is 0."""
    rng = np.random.default_rng(1)
    k = np.array([1, 2, 3, 5, 3, 2, 4, 1])
    _, cluster, _ = _units(rng, k)
    video_w, trial_w = two_stage_weights(cluster, k.size, 4000, seed=3)
    drawn = trial_w + video_w[:, cluster]  # times each unit is drawn
    assert (drawn >= 0).all() and np.array_equal(drawn, np.round(drawn))
    for v in range(k.size):
        mine = cluster == v
        np.testing.assert_array_equal(drawn[:, mine].sum(1), video_w[:, v] * k[v] if k[v] > 1 else video_w[:, v])
        if k[v] == 1:
            assert (trial_w[:, mine] == 0).all()
        else:  # given one draw of the video, each trial is drawn Binomial(K, 1/K) times: mean 1, var (K-1)/K
            once = video_w[:, v] == 1
            d = drawn[once][:, mine]
            assert d.mean() == pytest.approx(1.0, abs=0.05)
            assert d.var() == pytest.approx((k[v] - 1) / k[v], rel=0.1)
    # the video draws are capeval.kernels.bootstrap's draws: the nested loop over them gives the same video weights
    idx = resample_indices(k.size, 4000, seed=3)
    np.testing.assert_array_equal(video_w, np.stack([np.bincount(i, minlength=k.size) for i in idx]))


def test_deterministic_and_chunk_independent():
    rng = np.random.default_rng(2)
    units, cluster, videos = _units(rng, rng.integers(1, 4, 40))
    a = two_stage_bootstrap(videos, units, cluster, ratio, 900, seed=5, chunk=64)
    b = two_stage_bootstrap(videos, units, cluster, ratio, 900, seed=5, chunk=900)
    np.testing.assert_array_equal(a.two_stage, b.two_stage)
    c = two_stage_bootstrap(videos, units, cluster, ratio, 900, seed=6)
    assert not np.array_equal(a.two_stage, c.two_stage)


def test_one_trial_per_video_equals_the_video_bootstrap_exactly():
    rng = np.random.default_rng(3)
    units, cluster, videos = _units(rng, np.ones(50, dtype=int))
    samples = two_stage_bootstrap(videos, units, cluster, ratio, 700, seed=2)
    np.testing.assert_array_equal(samples.two_stage, samples.video)
    noise = judge_noise(ratio(videos.sum(0)), samples)
    np.testing.assert_array_equal(noise.replicates, cluster_bootstrap(videos, ratio, 700, seed=2))
    assert noise.judge_noise_share == 0.0 and noise.trial_variance == 0.0


def test_trial_variance_is_unbiased_for_the_judge_noise_of_a_mean():
    """Statistic: the mean of one value per unit (sum of values / units). Each draw of video v adds, with the
    sqrt(K/(K-1)) scaling, K_v * s_v^2 (s_v^2 the unbiased variance of its trial values) to the variance of the
    summed values; a video is drawn once on average: Var(shift) = sum_v K_v s_v^2 / N^2 to first order."""
    rng = np.random.default_rng(4)
    k = rng.integers(2, 6, 150)
    cluster = np.repeat(np.arange(k.size), k)
    values = rng.normal(0, 1, k.size)[cluster] + rng.normal(0, 2, cluster.size)
    units = np.stack([values, np.ones_like(values)], axis=1)
    videos = np.zeros((k.size, 2))
    np.add.at(videos, cluster, units)
    samples = two_stage_bootstrap(videos, units, cluster, lambda s: s[..., 0] / s[..., 1], 20000, seed=9)
    noise = judge_noise(values.mean(), samples)
    s2 = np.array([values[cluster == v].var(ddof=1) for v in range(k.size)])
    expected = (k * s2).sum() / cluster.size ** 2
    assert noise.trial_variance == pytest.approx(expected, rel=0.05)
    # the two-stage replicates keep the video bootstrap's variance; the naive two-stage (no shrinkage) adds J
    assert noise.replicates.var() == pytest.approx(noise.video_variance, rel=0.03)
    assert samples.two_stage.var() == pytest.approx(noise.video_variance + expected, rel=0.05)


def test_layout_groups_units_by_trial_count_then_video():
    layout = unit_layout(np.array([2, 0, 1, 2, 0, 2, 3]), 4)
    assert layout.n_trials.tolist() == [2, 1, 3, 1]
    assert layout.order.tolist() == [1, 4, 0, 3, 5]  # video 0 (K=2), then video 2 (K=3); single trials left out
    assert layout.unit_start[[0, 2]].tolist() == [0, 2]
    assert [(lo, hi) for lo, hi, _ in layout.blocks] == [(0, 2), (2, 5)]
    assert [s for *_, s in layout.blocks] == pytest.approx([np.sqrt(2.0), np.sqrt(1.5)])
    with pytest.raises(ValueError):
        unit_layout(np.array([0, 4]), 4)


def test_each_group_resamples_only_the_trials_it_was_judged_in():
    """Group 0 judged in 3 trials per video, group 1 only in the first: group 1's shift is exactly 0, and group 0
    gets the replicates it gets alone (patterns share the video draws and the trial stream)."""
    rng = np.random.default_rng(5)
    n_videos = 30
    cluster = np.repeat(np.arange(n_videos), 3)
    units = rng.integers(0, 9, (cluster.size, 2, 2))
    units[np.arange(cluster.size) % 3 != 0, 1] = 0  # group 1 has no rows in trials 1 and 2
    present = np.stack([np.ones(cluster.size, dtype=bool), np.arange(cluster.size) % 3 == 0], axis=1)
    videos = np.zeros((n_videos, 2, 2), dtype=units.dtype)
    np.add.at(videos, cluster, units)
    both = two_stage_bootstrap(videos, units, cluster, ratio, 600, seed=8, present=present)
    np.testing.assert_array_equal(both.two_stage[:, 1], both.video[:, 1])
    alone = two_stage_bootstrap(videos[:, :1], units[:, :1], cluster, ratio, 600, seed=8)
    np.testing.assert_array_equal(both.two_stage[:, :1], alone.two_stage)
    pooled = two_stage_bootstrap(videos, units, cluster, ratio, 600, seed=8)  # without `present`: all 3 trials
    assert not np.array_equal(pooled.two_stage[:, 1], pooled.video[:, 1])


def test_many_videos_are_resampled_in_blocks_of_bounded_size_with_the_same_replicates():
    """Integer counts of many videos are resampled a few replicates at a time (the block's weight matrices within
    capeval.kernels.bootstrap.WEIGHT_BYTES): blocks of another height give the same replicates."""
    rng = np.random.default_rng(5)
    units, cluster, videos = _units(rng, rng.integers(1, 4, 30_000))
    a = two_stage_bootstrap(videos, units, cluster, ratio, 60, seed=1)
    b = two_stage_bootstrap(videos, units, cluster, ratio, 60, seed=1, chunk=7)
    np.testing.assert_array_equal(a.video, b.video)
    np.testing.assert_array_equal(a.two_stage, b.two_stage)
