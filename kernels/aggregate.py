"""Typed entry points to the Cython count kernels (kernels/_aggregate.pyx).

Callers may pass any integer arrays; each is converted once to the contiguous dtype the kernel reads
(int32 ids, int8 codes). Codes outside [0, n_codes) — NO_VERDICT (-1) — land in the last column.
"""

from __future__ import annotations

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


def count_codes_by_cluster(cluster_ids, group_ids, codes, n_clusters: int, n_groups: int, n_codes: int) -> np.ndarray:
    """int64 (n_clusters, n_groups, n_codes + 1): rows per (cluster, group, code), in one pass over the rows."""
    if n_clusters < 0 or n_groups < 0 or n_codes < 0:
        raise ValueError(f"n_clusters={n_clusters}, n_groups={n_groups}, n_codes={n_codes} must be >= 0")
    return _aggregate.count_codes_by_cluster(
        _as(cluster_ids, np.int32, "cluster_ids"), _as(group_ids, np.int32, "group_ids"), _as(codes, np.int8, "codes"),
        int(n_clusters), int(n_groups), int(n_codes))
