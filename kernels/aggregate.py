"""Typed entry points to the Cython count kernels (kernels/_aggregate.pyx).

Callers may pass any integer arrays; each is converted once to the contiguous dtype the kernel reads
(int32 ids, int8 codes). Codes outside [0, n_codes) — NO_VERDICT (-1) — land in the last column.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from kernels import _aggregate


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

    Large inputs are split over up to `threads` threads (default: available cores), each counting its slice
    into its own int32 table without the GIL; the tables are summed once."""
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
    n_threads = max(1, min(threads or _threads(), n // PARALLEL_MIN_ROWS, 8))
    bounds = np.linspace(0, n, n_threads + 1).astype(np.int64)
    if bounds.size > 1 and np.diff(bounds).max(initial=0) >= 2**31 - 1:
        raise ValueError(f"{n} rows: a slice exceeds int32 cells; pass threads=None or split the input")
    tables = [np.zeros(shape, dtype=np.int32) for _ in range(n_threads)]

    def run(k: int) -> int:
        lo, hi = bounds[k], bounds[k + 1]
        bad = _aggregate.add_codes_by_cluster(clusters[lo:hi], groups[lo:hi], codes8[lo:hi], tables[k])
        return -1 if bad < 0 else int(lo + bad)

    if n_threads == 1:
        bad_rows = [run(0)]
    else:
        pool = _POOLS.get(n_threads) or _POOLS.setdefault(
            n_threads, ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="capeval-count"))
        bad_rows = list(pool.map(run, range(n_threads)))
    bad = [b for b in bad_rows if b >= 0]
    if bad:
        row = min(bad)
        if not 0 <= groups[row] < n_groups:
            raise ValueError(f"row {row}: group id {groups[row]} outside [0, {n_groups})")
        raise ValueError(f"row {row}: cluster id {clusters[row]} outside [0, {n_clusters})")
    out = tables[0].astype(np.int64)
    for table in tables[1:]:
        out += table
    return out
