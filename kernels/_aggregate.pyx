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



def add_codes_by_cluster(const int32_t[::1] cluster_ids, const int32_t[::1] group_ids, const int8_t[::1] codes,
                         int32_t[:, :, ::1] counts):
    """counts[v, g, c] += rows of cluster v, group g and code c (codes outside [0, n_codes) -> column n_codes).

    int32 cells halve the table the random scatter touches; the caller keeps each table below 2**31 rows.
    Runs without the GIL, so callers may fill separate tables from several threads. Returns the first bad row
    (an id out of range) or -1."""
    cdef Py_ssize_t n = group_ids.shape[0]
    if codes.shape[0] != n or cluster_ids.shape[0] != n:
        raise ValueError(f"cluster_ids, group_ids and codes must have equal lengths, got "
                         f"{cluster_ids.shape[0]}, {n}, {codes.shape[0]}")
    cdef size_t n_clusters = counts.shape[0], n_groups = counts.shape[1], n_codes = counts.shape[2] - 1
    cdef Py_ssize_t i, bad = -1
    cdef size_t v, g, c
    with nogil:
        for i in range(n):
            g = <size_t>group_ids[i]  # a negative id wraps to a huge value: one unsigned compare checks both ends
            v = <size_t>cluster_ids[i]
            if g >= n_groups or v >= n_clusters:
                bad = i
                break
            c = <size_t>codes[i]
            if c >= n_codes:
                c = n_codes
            counts[v, g, c] += 1
    return bad
