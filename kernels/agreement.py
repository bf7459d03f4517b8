"""Inter-rater agreement: Gwet's AC1 (any number of raters and categories, missing ratings allowed) and
Cohen's kappa (two raters). Ratings are integer category codes; a negative code (NO_VERDICT = -1) is missing."""

from __future__ import annotations

import numpy as np


def _ratings(ratings, name: str = "ratings") -> np.ndarray:
    arr = np.asarray(ratings)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D items x raters matrix, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must hold integer category codes (negative = missing), got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def category_counts(ratings, n_categories: int | None = None) -> np.ndarray:
    """(items, q) int64: how many raters put each item in each category (missing ratings skipped)."""
    arr = _ratings(ratings)
    q = int(n_categories) if n_categories is not None else (int(arr.max()) + 1 if arr.size and arr.max() >= 0 else 0)
    if arr.size and arr.max() >= q:
        raise ValueError(f"rating {arr.max()} outside [0, {q}) categories")
    items = np.repeat(np.arange(arr.shape[0]), arr.shape[1])
    flat = arr.ravel()
    keep = flat >= 0
    out = np.zeros((arr.shape[0], q), dtype=np.int64)
    np.add.at(out, (items[keep], flat[keep]), 1)
    return out


def gwet_ac1(ratings, n_categories: int | None = None) -> float:
    """Gwet's AC1 (Gwet 2008; Handbook of Inter-Rater Reliability) for an items x raters matrix.

    Observed agreement uses items rated at least twice; category prevalences use items rated at least once.
    q = n_categories, or the number of categories actually used when None (as irrCAC without categ.labels).
    nan when no item has two ratings or q < 2.
    """
    counts = category_counts(ratings, n_categories)
    if n_categories is None:
        counts = counts[:, counts.sum(axis=0) > 0]
    q = counts.shape[1]
    r = counts.sum(axis=1)
    rated, paired = r >= 1, r >= 2
    if q < 2 or not paired.any():
        return float("nan")
    rp = r[paired][:, None].astype(np.float64)
    pa = float(np.mean((counts[paired] * (counts[paired] - 1)).sum(axis=1) / (rp[:, 0] * (rp[:, 0] - 1))))
    pi = (counts[rated] / r[rated][:, None]).mean(axis=0)
    pe = float((pi * (1.0 - pi)).sum() / (q - 1))
    if pe >= 1.0:
        return float("nan")
    return (pa - pe) / (1.0 - pe)


def cohen_kappa(rater_a, rater_b, n_categories: int | None = None) -> float:
    """Cohen's kappa for two raters; pairs where either rating is missing are dropped. nan when undefined."""
    a = np.asarray(rater_a).ravel()
    b = np.asarray(rater_b).ravel()
    if a.shape != b.shape:
        raise ValueError(f"rater_a and rater_b must have the same length, got {a.size} and {b.size}")
    both = _ratings(np.stack([a, b], axis=1), "rater_a/rater_b")
    both = both[(both >= 0).all(axis=1)]
    if both.shape[0] == 0:
        return float("nan")
    q = int(n_categories) if n_categories is not None else int(both.max()) + 1
    if both.max() >= q:
        raise ValueError(f"rating {both.max()} outside [0, {q}) categories")
    table = np.zeros((q, q), dtype=np.float64)
    np.add.at(table, (both[:, 0], both[:, 1]), 1.0)
    n = table.sum()
    po = np.trace(table) / n
    pe = float((table.sum(axis=1) * table.sum(axis=0)).sum() / n**2)
    if pe >= 1.0:
        return float("nan")
    return float((po - pe) / (1.0 - pe))
