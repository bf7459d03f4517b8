"""Typed entry points to the Cython count kernels (kernels/_aggregate.pyx).

Callers may pass any integer arrays; each is converted once to the contiguous dtype the kernel reads
(int32 ids, int8 codes). Codes outside [0, n_codes) — NO_VERDICT (-1) — land in the last column.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from capeval.kernels import _aggregate


def _as(values, dtype, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.size and arr.dtype.itemsize > np.dtype(dtype).itemsize:
        info = np.iinfo(dtype)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise ValueError(f"{name} has values in [{lo}, {hi}], outside {np.dtype(dtype)}")
    return np.ascontiguousarray(arr, dtype=dtype)


def count_codes(group_ids, codes, n_groups: int, n_codes: int) -> np.ndarray:
    """int64 (n_groups, n_codes + 1): rows per (group, code); the last column counts codes outside [0, n_codes)."""
    if n_groups < 0 or n_codes < 0:
        raise ValueError(f"n_groups={n_groups} and n_codes={n_codes} must be >= 0")
    return _aggregate.count_codes(_as(group_ids, np.int32, "group_ids"), _as(codes, np.int8, "codes"),
                                  int(n_groups), int(n_codes))


#: rows per thread below which one thread is faster than splitting (thread start and table merge cost)
PARALLEL_MIN_ROWS = 250_000
_POOLS: dict[int, ThreadPoolExecutor] = {}


def _threads() -> int:
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8))


def count_codes_by_cluster(cluster_ids, group_ids, codes, n_clusters: int, n_groups: int, n_codes: int,
                           threads: int | None = None) -> np.ndarray:
    """int64 (n_clusters, n_groups, n_codes + 1): rows per (cluster, group, code), in one pass over the rows.

    Rows are counted into uint8 cells (a table 8x smaller than the int64 result, so the random scatter stays
    in cache); a cell that wraps past 255 is logged and 256 added back when the int64 result is written.
    With `threads` (default: available cores when there are 2 * PARALLEL_MIN_ROWS rows or more) the rows are
    split over threads, each counting its slice into its own table without the GIL; the tables are summed once."""
    if n_clusters < 0 or n_groups < 0 or n_codes < 0:
        raise ValueError(f"n_clusters={n_clusters}, n_groups={n_groups}, n_codes={n_codes} must be >= 0")
    clusters = _as(cluster_ids, np.int32, "cluster_ids")
    groups = _as(group_ids, np.int32, "group_ids")
    codes8 = _as(codes, np.int8, "codes")
    if not clusters.size == groups.size == codes8.size:
        raise ValueError(f"cluster_ids, group_ids and codes must have equal lengths, got "
                         f"{clusters.size}, {groups.size}, {codes8.size}")
    n = groups.size
    shape = (int(n_clusters), int(n_groups), int(n_codes) + 1)
    cells = shape[0] * shape[1] * shape[2]
    # auto: split only when each thread gets PARALLEL_MIN_ROWS rows; an explicit `threads` is honoured (tests)
    n_threads = max(1, min(_threads(), n // PARALLEL_MIN_ROWS) if threads is None else min(threads, n // 1024, 8))
    bounds = np.linspace(0, n, n_threads + 1).astype(np.int64)
    tables = np.zeros((n_threads, cells), dtype=np.uint8)
    wraps = [np.empty(int(bounds[k + 1] - bounds[k]) // 256 + 1, dtype=np.int64) for k in range(n_threads)]

    def run(k: int) -> tuple[int, int]:
        lo, hi = bounds[k], bounds[k + 1]
        bad, n_wraps = _aggregate.add_codes_by_cluster_u8(clusters[lo:hi], groups[lo:hi], codes8[lo:hi], tables[k],
                                                           wraps[k], *shape[:2], shape[2] - 1)
        return (-1 if bad < 0 else int(lo + bad)), n_wraps

    if n_threads == 1:
        results = [run(0)]
    else:
        pool = _POOLS.get(n_threads) or _POOLS.setdefault(
            n_threads, ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="capeval-count"))
        results = list(pool.map(run, range(n_threads)))
    bad = [b for b, _ in results if b >= 0]
    if bad:
        row = min(bad)
        if not 0 <= groups[row] < n_groups:
            raise ValueError(f"row {row}: group id {groups[row]} outside [0, {n_groups})")
        raise ValueError(f"row {row}: cluster id {clusters[row]} outside [0, {n_clusters})")
    wrapped = wraps[0][: results[0][1]] if n_threads == 1 else np.concatenate(
        [w[:k] for w, (_, k) in zip(wraps, results)])
    out = np.empty(cells, dtype=np.int64)
    _aggregate.sum_u8_tables(tables, wrapped, out)
    return out.reshape(shape)
