"""uint8 count cells that wrap past 255 (and 65,535) must still give exact int64 counts."""

import numpy as np
import pytest

from capeval.kernels.aggregate import count_codes_by_cluster


def _bincount_reference(clusters, groups, codes, n_clusters, n_groups, n_codes):
    col = np.where((codes >= 0) & (codes < n_codes), codes, n_codes)
    flat = (clusters * n_groups + groups) * (n_codes + 1) + col
    return np.bincount(flat, minlength=n_clusters * n_groups * (n_codes + 1)).reshape(n_clusters, n_groups, n_codes + 1)


@pytest.mark.parametrize("threads", [1, 3])
def test_hot_cells_past_uint8_and_uint16(threads):
    rng = np.random.default_rng(5)
    # one cell gets 70,001 rows (wraps 273 times), one 256 (exactly one wrap to 0), the rest random
    clusters = np.concatenate([np.full(70_001, 3), np.full(256, 1), rng.integers(0, 6, 5_000)])
    groups = np.concatenate([np.full(70_001, 2), np.full(256, 0), rng.integers(0, 4, 5_000)])
    codes = np.concatenate([np.full(70_001, -1), np.full(256, 1), rng.integers(-1, 5, 5_000)])
    order = rng.permutation(clusters.size)  # hot rows spread over every thread's slice
    clusters, groups, codes = clusters[order], groups[order], codes[order]
    got = count_codes_by_cluster(clusters, groups, codes, 6, 4, 3, threads=threads)
    expected = _bincount_reference(clusters, groups, codes, 6, 4, 3)
    np.testing.assert_array_equal(got, expected)
    assert got[3, 2, 3] >= 70_001 and got.sum() == clusters.size


def test_many_code_columns_and_sorted_rows():
    rng = np.random.default_rng(6)
    n = 20_000
    clusters = np.sort(rng.integers(0, 40, n))  # sorted input: long runs on the same cells
    groups = rng.integers(0, 3, n)
    codes = rng.integers(-1, 128, n)  # every int8 code >= -1, with more columns than a uint8 code can name
    got = count_codes_by_cluster(clusters, groups, codes, 40, 3, 300)
    np.testing.assert_array_equal(got, _bincount_reference(clusters, groups, codes, 40, 3, 300))
    assert not got[..., 128:300].any() and got[..., 300].sum() == np.count_nonzero(codes < 0)
