# cython: boundscheck=False, wraparound=False, cdivision=True
"""Count tables from verdict codes in one pass, with no Python work per row."""

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t

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



DEF CHUNK = 2048  # rows whose table cells are computed before they are counted (8 KB of indices, in L1)


def add_codes_by_cluster_u8(const int32_t[::1] cluster_ids, const int32_t[::1] group_ids, const int8_t[::1] codes,
                            uint8_t[::1] counts, int64_t[::1] wraps, Py_ssize_t n_clusters, Py_ssize_t n_groups,
                            Py_ssize_t n_codes):
    """counts (the flat (n_clusters, n_groups, n_codes + 1) table, uint8) += rows per (cluster, group, code);
    codes outside [0, n_codes) (NO_VERDICT) count in column n_codes.

    Why uint8: 1 byte a cell makes the table the random scatter touches 4x smaller than int32 (2,000 videos x
    50 groups x 4 codes = 400 KB: it stays in L2). A cell that wraps 255 -> 0 appends its flat index to `wraps`
    (which needs len(rows) // 256 + 1 slots), so the caller adds 256 per entry and nothing is lost.
    Why chunks: computing a chunk's cell indices first is a branch-free loop the compiler vectorizes (range
    checks OR-ed into one flag); the scatter loop that follows does nothing but increment.
    Runs without the GIL, so callers may fill separate tables from several threads.
    Returns (first bad row (an id out of range) or -1, number of wraps written)."""
    cdef Py_ssize_t n = group_ids.shape[0]
    if codes.shape[0] != n or cluster_ids.shape[0] != n:
        raise ValueError(f"cluster_ids, group_ids and codes must have equal lengths, got "
                         f"{cluster_ids.shape[0]}, {n}, {codes.shape[0]}")
    if n_clusters < 0 or n_groups < 0 or n_codes < 0:
        raise ValueError(f"n_clusters={n_clusters}, n_groups={n_groups}, n_codes={n_codes} must be >= 0")
    if n_clusters * n_groups * (n_codes + 1) >= 2**32:
        raise ValueError(f"a ({n_clusters}, {n_groups}, {n_codes + 1}) table has 2**32 cells or more")
    if counts.shape[0] != n_clusters * n_groups * (n_codes + 1):
        raise ValueError(f"counts has {counts.shape[0]} cells, expected {n_clusters * n_groups * (n_codes + 1)}")
    if wraps.shape[0] < n // 256 + 1:
        raise ValueError(f"wraps needs {n // 256 + 1} slots, got {wraps.shape[0]}")
    if n == 0:
        return -1, 0
    cdef uint32_t nv = <uint32_t>n_clusters, ng = <uint32_t>n_groups, nc = <uint32_t>n_codes
    cdef uint32_t width = nc + 1, stride_v = ng * width
    cdef uint32_t cells[CHUNK]
    cdef const int32_t* gp = &group_ids[0]
    cdef const int32_t* vp = &cluster_ids[0]
    cdef const int8_t* cp = &codes[0]
    cdef uint8_t* table = &counts[0] if counts.shape[0] else NULL
    cdef Py_ssize_t i0 = 0, j, m, bad = -1, w = 0
    cdef uint32_t g, v, c, oob, cell
    cdef uint8_t x
    with nogil:
        while i0 < n:
            m = n - i0 if n - i0 < CHUNK else CHUNK
            oob = 0
            for j in range(m):
                g = <uint32_t>gp[i0 + j]  # a negative id wraps to a huge value: one unsigned compare checks both ends
                v = <uint32_t>vp[i0 + j]
                c = <uint32_t><int32_t>cp[i0 + j]  # sign-extended: a negative code is huge, so >= n_codes
                oob |= (g >= ng) | (v >= nv)
                c = c if c < nc else nc
                cells[j] = v * stride_v + g * width + c
            if oob:
                for j in range(m):
                    if <uint32_t>gp[i0 + j] >= ng or <uint32_t>vp[i0 + j] >= nv:
                        bad = i0 + j
                        break
                break
            for j in range(m):
                cell = cells[j]
                x = table[cell] + 1
                table[cell] = x
                if x == 0:
                    wraps[w] = cell
                    w += 1
            i0 += m
    return bad, w


def sum_u8_tables(const uint8_t[:, ::1] tables, const int64_t[::1] wraps, int64_t[::1] out):
    """out[j] = sum over k of tables[k, j] + 256 * (times j appears in wraps): the int64 result of uint8 counts."""
    cdef Py_ssize_t k, j, m = out.shape[0], n_tables = tables.shape[0]
    if tables.shape[1] != m:
        raise ValueError(f"tables have {tables.shape[1]} cells, out has {m}")
    cdef int64_t* o = &out[0] if m else NULL
    cdef const uint8_t* t
    with nogil:
        if n_tables == 0:
            for j in range(m):
                o[j] = 0
        else:
            t = &tables[0, 0]
            for j in range(m):
                o[j] = t[j]
            for k in range(1, n_tables):
                t = &tables[k, 0]
                for j in range(m):
                    o[j] += t[j]
        for j in range(wraps.shape[0]):
            o[wraps[j]] += 256
