"""kernels/: the (video, group, code) count table and the video-resampling bootstrap at sizes a sweep produces."""

from __future__ import annotations

import numpy as np
import pytest

from capeval.kernels.aggregate import count_codes_by_cluster
from capeval.kernels.bootstrap import cluster_bootstrap, percentile_ci

N_ROWS, N_VIDEOS, N_GROUPS, N_CODES = 200_000, 2_000, 50, 3


@pytest.fixture(scope="module")
def verdict_columns():
    rng = np.random.default_rng(0)
    videos = rng.integers(0, N_VIDEOS, N_ROWS, dtype=np.int32)
    groups = rng.integers(0, N_GROUPS, N_ROWS, dtype=np.int32)
    codes = rng.choice(np.array([-1, 0, 1, 2], dtype=np.int8), N_ROWS, p=[0.02, 0.28, 0.45, 0.25])
    return videos, groups, codes


def test_count_codes_by_cluster(benchmark, verdict_columns):
    videos, groups, codes = verdict_columns
    table = benchmark(count_codes_by_cluster, videos, groups, codes, N_VIDEOS, N_GROUPS, N_CODES)
    assert table.shape[:2] == (N_VIDEOS, N_GROUPS)
    assert int(table.sum()) == N_ROWS  # every row counted once; codes outside 0..N_CODES-1 in the last column
    assert int(table[..., :N_CODES].sum()) == int((codes >= 0).sum())
    v, g = int(videos[0]), int(groups[0])
    mask = (videos == v) & (groups == g)
    assert table[v, g].tolist()[:N_CODES] == [int(((codes == c) & mask).sum()) for c in range(N_CODES)]


def test_cluster_bootstrap_precision(benchmark, verdict_columns):
    videos, groups, codes = verdict_columns
    table = count_codes_by_cluster(videos, groups, codes, N_VIDEOS, N_GROUPS, N_CODES)
    used = np.ascontiguousarray(table[..., [1, 2]])

    def precision(sums):
        den = sums[..., 0] + sums[..., 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, sums[..., 0] / den, np.nan)

    low, high = benchmark(lambda: percentile_ci(cluster_bootstrap(used, precision, 1000, seed=0), 0.95))
    point = precision(used.sum(axis=0))
    assert low.shape == (N_GROUPS,) and np.all(low <= point) and np.all(point <= high)
    assert np.all(high - low < 0.1)  # 2,000 videos: a tight interval around 0.45 / 0.70
