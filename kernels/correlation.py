"""Rank correlations in O(n log n): Kendall tau-b (Knight 1966, with ties in x, in y and joint ties), Kendall
tau-c (Stuart) and Spearman rho with average ranks. Results match scipy.stats; nan where undefined (n < 2, a
constant input, or any nan in the input, as scipy's nan_policy='propagate')."""

from __future__ import annotations

import numpy as np

from capeval.kernels._numba import njit


@njit(cache=True)
def _inversions(values):
    """Sorts `values` in place (bottom-up merge sort) and returns the number of pairs i < j with v[i] > v[j]."""
    n = values.shape[0]
    buf = np.empty_like(values)
    swaps = 0
    width = 1
    src, dst = values, buf
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if src[j] < src[i]:
                    dst[k] = src[j]
                    swaps += mid - i  # src[j] jumps ahead of every element left in the first run
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
        src, dst = dst, src
        width *= 2
    if src is not values:
        values[:] = src
    return swaps


@njit(cache=True)
def _tied_pairs(sorted_values):
    """(sum over runs of equal values of t(t-1)/2, number of distinct values) for a sorted array."""
    n = sorted_values.shape[0]
    pairs = 0
    distinct = 0
    run = 1
    for i in range(1, n + 1):
        if i < n and sorted_values[i] == sorted_values[i - 1]:
            run += 1
        else:
            pairs += run * (run - 1) // 2
            distinct += 1
            run = 1
    return pairs, distinct


@njit(cache=True)
def _kendall_parts(xs, ys):
    """xs, ys sorted by (x, y). Returns (concordant - discordant, n0, x ties, y ties, distinct x, distinct y)."""
    n = xs.shape[0]
    n0 = n * (n - 1) // 2
    x_ties, x_distinct = _tied_pairs(xs)
    joint = 0
    run = 1
    for i in range(1, n + 1):
        if i < n and xs[i] == xs[i - 1] and ys[i] == ys[i - 1]:
            run += 1
        else:
            joint += run * (run - 1) // 2
            run = 1
    y_work = ys.copy()
    discordant = _inversions(y_work)  # within an x tie ys is ascending, so those pairs add no inversions
    y_ties, y_distinct = _tied_pairs(y_work)
    con_minus_dis = n0 - x_ties - y_ties + joint - 2 * discordant
    return con_minus_dis, n0, x_ties, y_ties, x_distinct, y_distinct


def _prepare(x, y):
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length, got {x.size} and {y.size}")
    if x.size < 2 or np.isnan(x).any() or np.isnan(y).any():
        return None
    order = np.lexsort((y, x))
    return np.ascontiguousarray(x[order]), np.ascontiguousarray(y[order])


def kendall_tau_b(x, y) -> float:
    """Kendall's tau-b (ties adjusted), as scipy.stats.kendalltau(variant='b')."""
    prepared = _prepare(x, y)
    if prepared is None:
        return float("nan")
    cmd, n0, xt, yt, _, _ = _kendall_parts(*prepared)
    if xt == n0 or yt == n0:
        return float("nan")
    return float(min(1.0, max(-1.0, cmd / np.sqrt(float(n0 - xt) * float(n0 - yt)))))


def kendall_tau_c(x, y) -> float:
    """Stuart's tau-c, as scipy.stats.kendalltau(variant='c')."""
    prepared = _prepare(x, y)
    if prepared is None:
        return float("nan")
    cmd, n0, xt, yt, xd, yd = _kendall_parts(*prepared)
    if xt == n0 or yt == n0:
        return float("nan")
    n = prepared[0].size
    m = min(xd, yd)
    return float(min(1.0, max(-1.0, 2.0 * cmd / (float(n) ** 2 * (m - 1) / m))))


@njit(cache=True)
def _average_ranks(values):
    """1-based ranks, ties get the mean of the ranks they span."""
    n = values.shape[0]
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(n, dtype=np.float64)
    i = 0
    while i < n:
        j = i
        while j + 1 < n and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = 0.5 * (i + j) + 1.0
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        i = j + 1
    return ranks


@njit(cache=True)
def _pearson(a, b):
    n = a.shape[0]
    ma = a.mean()
    mb = b.mean()
    sab = 0.0
    saa = 0.0
    sbb = 0.0
    for i in range(n):
        da = a[i] - ma
        db = b[i] - mb
        sab += da * db
        saa += da * da
        sbb += db * db
    if saa == 0.0 or sbb == 0.0:
        return np.nan
    r = sab / np.sqrt(saa * sbb)
    return min(1.0, max(-1.0, r))


def rank_average(values) -> np.ndarray:
    """Average ranks (1-based), as scipy.stats.rankdata(method='average')."""
    return _average_ranks(np.ascontiguousarray(values, dtype=np.float64).ravel())


def spearman_rho(x, y) -> float:
    """Spearman's rho: Pearson correlation of average ranks, as scipy.stats.spearmanr."""
    x = np.ascontiguousarray(x, dtype=np.float64).ravel()
    y = np.ascontiguousarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length, got {x.size} and {y.size}")
    if x.size < 2 or np.isnan(x).any() or np.isnan(y).any():
        return float("nan")
    return float(_pearson(_average_ranks(x), _average_ranks(y)))
