"""Cython count kernels against plain numpy loops."""

import numpy as np
import pytest

from capeval.kernels.aggregate import count_codes, count_codes_by_cluster


def _reference(cluster_ids, group_ids, codes, n_clusters, n_groups, n_codes):
    out = np.zeros((n_clusters, n_groups, n_codes + 1), dtype=np.int64)
    for v, g, c in zip(cluster_ids, group_ids, codes):
        out[v, g, c if 0 <= c < n_codes else n_codes] += 1
    return out


@pytest.mark.parametrize("n_rows", [0, 1, 5000])
def test_counts_match_loop_reference(n_rows):
    rng = np.random.default_rng(n_rows)
    n_clusters, n_groups, n_codes = 7, 5, 3
    clusters = rng.integers(0, n_clusters, n_rows)
    groups = rng.integers(0, n_groups - 1, n_rows)  # the last group stays empty
    codes = rng.integers(-1, n_codes + 2, n_rows)  # NO_VERDICT and out-of-range codes
    expected = _reference(clusters, groups, codes, n_clusters, n_groups, n_codes)
    got = count_codes_by_cluster(clusters, groups, codes, n_clusters, n_groups, n_codes)
    assert got.dtype == np.int64 and got.shape == (n_clusters, n_groups, n_codes + 1)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(count_codes(groups.astype(np.int16), codes, n_groups, n_codes), expected.sum(0))
    assert not got[:, -1].any()  # empty group


def test_all_no_verdict_lands_in_last_column():
    got = count_codes(np.zeros(4, np.int64), np.full(4, -1), 1, 2)
    np.testing.assert_array_equal(got, [[0, 0, 4]])


def test_bad_ids_name_the_row():
    with pytest.raises(ValueError, match="row 2: group id 3"):
        count_codes([0, 1, 3], [0, 0, 0], 3, 2)
    with pytest.raises(ValueError, match="row 1: cluster id -1"):
        count_codes_by_cluster([0, -1], [0, 0], [1, 1], 2, 1, 2)
    with pytest.raises(ValueError, match="equal lengths"):
        count_codes_by_cluster([0, 1], [0], [1, 1], 2, 1, 2)
    with pytest.raises(ValueError, match="outside int8"):
        count_codes([0], [300], 1, 2)
    with pytest.raises(TypeError, match="integers"):
        count_codes([0.5], [1], 1, 2)


def test_threaded_split_equals_single_pass():
    rng = np.random.default_rng(9)
    n = 600_000  # above the per-thread threshold: exercises the multi-table path
    clusters, groups, codes = rng.integers(0, 300, n), rng.integers(0, 20, n), rng.integers(-1, 4, n)
    one = count_codes_by_cluster(clusters, groups, codes, 300, 20, 3, threads=1)
    np.testing.assert_array_equal(count_codes_by_cluster(clusters, groups, codes, 300, 20, 3, threads=2), one)
    np.testing.assert_array_equal(one.sum(0), count_codes(groups, codes, 20, 3))
    groups[450_000] = 20
    with pytest.raises(ValueError, match="row 450000: group id 20"):
        count_codes_by_cluster(clusters, groups, codes, 300, 20, 3, threads=2)
