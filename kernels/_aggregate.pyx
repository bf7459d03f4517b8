# cython: boundscheck=False, wraparound=False, cdivision=True
"""Count tables from verdict codes in one pass, with no Python work per row."""

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int8_t, int32_t, int64_t

cnp.import_array()


def count_codes(const int32_t[::1] group_ids, const int8_t[::1] codes, Py_ssize_t n_groups, Py_ssize_t n_codes):
    """counts[g, c] = rows of group g with code c, for 0 <= c < n_codes; counts[g, n_codes] = rows whose code is
    outside [0, n_codes) (NO_VERDICT). Rows with a group id outside [0, n_groups) raise ValueError."""
    cdef Py_ssize_t n = group_ids.shape[0]
    if codes.shape[0] != n:
        raise ValueError(f"group_ids has {n} rows but codes has {codes.shape[0]}")
    out = np.zeros((n_groups, n_codes + 1), dtype=np.int64)
    cdef int64_t[:, ::1] counts = out
    cdef Py_ssize_t i, g, c
    cdef Py_ssize_t bad = -1
    with nogil:
        for i in range(n):
            g = group_ids[i]
            if g < 0 or g >= n_groups:
                bad = i
                break
            c = codes[i]
            if c < 0 or c >= n_codes:
                c = n_codes
            counts[g, c] += 1
    if bad >= 0:
        raise ValueError(f"row {bad}: group id {group_ids[bad]} outside [0, {n_groups})")
    return out


def count_codes_by_cluster(const int32_t[::1] cluster_ids, const int32_t[::1] group_ids, const int8_t[::1] codes,
                           Py_ssize_t n_clusters, Py_ssize_t n_groups, Py_ssize_t n_codes):
    """counts[v, g, c] = rows of cluster v and group g with code c; column n_codes counts codes outside
    [0, n_codes) (NO_VERDICT). One pass over the rows; ids outside their range raise ValueError naming the row."""
    cdef Py_ssize_t n = group_ids.shape[0]
    if codes.shape[0] != n or cluster_ids.shape[0] != n:
        raise ValueError(f"cluster_ids, group_ids and codes must have equal lengths, got "
                         f"{cluster_ids.shape[0]}, {n}, {codes.shape[0]}")
    out = np.zeros((n_clusters, n_groups, n_codes + 1), dtype=np.int64)
    cdef int64_t[:, :, ::1] counts = out
    cdef Py_ssize_t i, v, g, c
    cdef Py_ssize_t bad_group = -1, bad_cluster = -1
    with nogil:
        for i in range(n):
            g = group_ids[i]
            if g < 0 or g >= n_groups:
                bad_group = i
                break
            v = cluster_ids[i]
            if v < 0 or v >= n_clusters:
                bad_cluster = i
                break
            c = codes[i]
            if c < 0 or c >= n_codes:
                c = n_codes
            counts[v, g, c] += 1
    if bad_group >= 0:
        raise ValueError(f"row {bad_group}: group id {group_ids[bad_group]} outside [0, {n_groups})")
    if bad_cluster >= 0:
        raise ValueError(f"row {bad_cluster}: cluster id {cluster_ids[bad_cluster]} outside [0, {n_clusters})")
    return out
