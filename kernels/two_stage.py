"""Two-stage bootstrap: resample videos, then within each drawn video its judge trials; and the share of a metric's
sampling variance that is judge noise.

A metric pooled over V videos, each judged in K trials (judge seeds, or several judges), has sampling variance
B + J: B because videos differ, J because the judge answers the same (video, item) differently from trial to
trial. Resampling videos alone (capeval.kernels.bootstrap) already estimates B + J -- each video's counts carry their own
judge noise -- but cannot say how much of it is J. Resampling, in addition, the K trials of every drawn video
measures J, but adding that on top of the video stage counts J twice (the naive two-stage bootstrap's intervals
are too wide: with pure judge noise and K = 3, 5/3 of the variance). So, per metric (`judge_noise`):

  video replicates     θ1_b: videos resampled, trials kept: identical to cluster_bootstrap with the same seed;
  trial shift          δ_b = θ(sums with each drawn video's trials also resampled) − θ1_b. Each draw of a video
                       redraws its K trials with replacement; the deviations from "every trial once" are scaled
                       by sqrt(K / (K − 1)), since K draws spread only (K − 1) / K of the trials' variance, so
                       Var(δ) estimates J without bias;
  judge_noise_share    s = Var(δ) / Var(θ1), clipped to [0, 1]: the estimate of J / (B + J);
  two-stage replicates θ_b = θ̂ + sqrt(1 − s) (θ1_b − θ̂) + δ_b: the video stage shrunk to its between-video part
                       (the shrinkage correction for two-stage resampling of Davison & Hinkley 1997, §3.8, applied
                       to the replicate values), so that Var(θ_b) = Var(θ1) while the judge-noise part of the
                       spread comes from resampled trials.

Everything is evaluated on replicate sums, so the definitions hold for any smooth function of sums (ratios,
F1, averages over groups). The trial draws come from a second counter-based stream per replicate: results never
depend on chunking or threads, and a video with one trial draws nothing (its shift is exactly 0).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from capeval.kernels._numba import njit, prange
from capeval.kernels.bootstrap import (GOLDEN, S32, DEFAULT_CHUNK, check_seed, draw, exact_sums, mix, replicate_block,
                                      stream_start, strata_layout)

#: xor-ed into a replicate's video-stream start so that its trial stream is another, independent sequence
_TRIAL_STREAM = np.uint64(0xD1B54A32D192ED03)
_LOW32 = np.uint64(0xFFFFFFFF)


@njit(cache=True, parallel=True)
def _fill_two_stage(video_w, trial_w, members, offsets, unit_start, n_trials, seed, first):
    """video_w[r, v] = times video v is drawn in replicate first + r (the draws of capeval.kernels.bootstrap._fill_weights);
    trial_w[r, u] = times trial unit u is drawn over all draws of its video, minus video_w[r, its video]. Units of
    video v are unit_start[v] .. unit_start[v] + n_trials[v] - 1; videos with one trial have none. Rows must be
    zeroed; replicates run in parallel, each owning its rows and streams."""
    n_strata = offsets.shape[0] - 1
    for r in prange(video_w.shape[0]):
        start = stream_start(seed, first + r)
        state = mix(start)
        trial_state = mix(start ^ _TRIAL_STREAM)
        low, spare = np.uint64(0), False
        for s in range(n_strata):
            lo = offsets[s]
            size = np.uint64(offsets[s + 1] - lo)
            for _ in range(offsets[s + 1] - lo):
                state, j = draw(state, size)
                v = members[lo + j]
                video_w[r, v] += 1.0
                k = n_trials[v]
                if k > 1:
                    kk = np.uint64(k)
                    base = unit_start[v]
                    for _ in range(k):
                        if spare:  # the low half of the last 64-bit output: one mix per two trial draws
                            bits = low
                            spare = False
                        else:
                            trial_state = trial_state + GOLDEN
                            y = mix(trial_state)
                            bits, low, spare = y >> S32, y & _LOW32, True
                        trial_w[r, base + np.int64((bits * kk) >> S32)] += 1.0
        for v in range(n_trials.shape[0]):
            k = n_trials[v]
            n = video_w[r, v]
            if k > 1 and n > 0:
                base = unit_start[v]
                for u in range(base, base + k):
                    trial_w[r, u] -= n


@dataclass(frozen=True)
class UnitLayout:
    """Trial units of videos with K >= 2 trials, ordered by (K, video): each video's units are contiguous, and so
    are all units of one K (one exact BLAS product per K, scaled once)."""

    order: np.ndarray  # int64 (n_multi_units,): indices into the caller's units
    unit_start: np.ndarray  # int64 (n_videos,): first position of the video's units in `order`
    n_trials: np.ndarray  # int64 (n_videos,): trial units per video
    blocks: tuple[tuple[int, int, float], ...]  # (lo, hi, sqrt(K / (K - 1))) per K present


def unit_layout(unit_cluster, n_clusters: int) -> UnitLayout:
    """The layout of trial units given each unit's video (cluster) index."""
    cluster = np.asarray(unit_cluster, dtype=np.int64)
    if cluster.ndim != 1:
        raise ValueError(f"unit_cluster must be one-dimensional, got shape {cluster.shape}")
    if cluster.size and (cluster.min() < 0 or cluster.max() >= n_clusters):
        raise ValueError(f"unit_cluster values must lie in [0, {n_clusters})")
    n_trials = np.bincount(cluster, minlength=n_clusters).astype(np.int64)
    multi = np.flatnonzero(n_trials[cluster] > 1)
    k_of = n_trials[cluster[multi]]
    order = multi[np.lexsort((cluster[multi], k_of))]
    sorted_cluster, sorted_k = cluster[order], n_trials[cluster[order]]
    unit_start = np.zeros(n_clusters, dtype=np.int64)
    firsts = np.flatnonzero(np.r_[True, sorted_cluster[1:] != sorted_cluster[:-1]]) if order.size else order
    unit_start[sorted_cluster[firsts]] = firsts
    edges = np.flatnonzero(np.r_[True, sorted_k[1:] != sorted_k[:-1], True]) if order.size else np.array([0])
    blocks = tuple((int(lo), int(hi), float(np.sqrt(sorted_k[lo] / (sorted_k[lo] - 1.0))))
                   for lo, hi in zip(edges[:-1], edges[1:]))
    return UnitLayout(order.astype(np.int64), unit_start, n_trials, blocks)


def _exact32(flat: np.ndarray, bound: float) -> bool:
    """float32 BLAS is exact while every partial sum is an integer below 2**24 (see capeval.kernels.bootstrap)."""
    return (np.issubdtype(flat.dtype, np.integer) and flat.size > 0 and flat.min() >= 0
            and float(flat.max()) * bound < 2**24)


def two_stage_weights(unit_cluster, n_clusters: int, n_resamples: int, seed: int, strata=None,
                      first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(video weights (B, V), trial weights (B, U)) of replicates first .. first + B - 1, as float64. Video weights
    equal capeval.kernels.bootstrap.resample_weights; a unit's trial weight is the times it is drawn minus the times its
    video is drawn (0 for units of videos with one trial), unscaled."""
    layout = unit_layout(unit_cluster, n_clusters)
    members, offsets = strata_layout(n_clusters, strata)
    video_w = np.zeros((n_resamples, n_clusters), dtype=np.float32)
    trial_w = np.zeros((n_resamples, layout.order.size), dtype=np.float32)
    _fill_two_stage(video_w, trial_w, members, offsets, layout.unit_start, layout.n_trials, check_seed(seed),
                    int(first))
    out = np.zeros((n_resamples, np.asarray(unit_cluster).shape[0]))
    out[:, layout.order] = trial_w
    return video_w.astype(np.float64), out


@dataclass(frozen=True)
class TwoStageSamples:
    video: np.ndarray  # (B, ...) replicates with videos resampled (= cluster_bootstrap, same seed)
    two_stage: np.ndarray  # (B, ...) replicates with each drawn video's trials resampled too (scaled deviations)


@dataclass(frozen=True)
class _Pattern:
    """Groups that hold rows in the same trial units, their columns, and the layout of those units."""

    layout: UnitLayout  # of the units they hold rows in (its `order` indexes those units)
    columns: np.ndarray | slice  # their columns in the flattened trailing shape
    counts: np.ndarray  # (units in layout order, columns) float32 when exact, else float64


def _patterns(units: np.ndarray, unit_cluster: np.ndarray, n_clusters: int, present) -> list[_Pattern]:
    """One pattern per distinct column of `present` (bool (U, P), P the first trailing axis), or one for all."""
    flat = units.reshape(units.shape[0], -1)
    if present is None:
        chosen = [(np.arange(units.shape[0]), slice(None))]
    else:
        present = np.asarray(present, dtype=bool)
        if present.shape != units.shape[:2]:
            raise ValueError(f"present must have shape {units.shape[:2]} (units, first trailing axis)")
        width = flat.shape[1] // max(units.shape[1], 1)
        kinds, which = np.unique(present.T, axis=0, return_inverse=True)
        chosen = []
        for i, kind in enumerate(kinds):
            groups = np.flatnonzero(which.ravel() == i)
            chosen.append((np.flatnonzero(kind), (groups[:, None] * width + np.arange(width)).ravel()))
    out = []
    for rows, columns in chosen:
        layout = unit_layout(unit_cluster[rows], n_clusters)
        if not layout.order.size:  # no video with two trials: the shift is exactly 0
            continue
        mine = flat[rows[layout.order]][:, columns]
        # |trial weight| summed over a replicate's units <= 2 * (draws * K): the bound for exact float32
        dtype = np.float32 if _exact32(mine, 2.0 * n_clusters * int(layout.n_trials.max())) else np.float64
        out.append(_Pattern(layout, columns, np.ascontiguousarray(mine, dtype=dtype)))
    return out


def two_stage_bootstrap(cluster_counts: np.ndarray, unit_counts: np.ndarray, unit_cluster,
                        statistic: Callable[[np.ndarray], np.ndarray], n_resamples: int, seed: int, strata=None,
                        present=None, chunk: int = DEFAULT_CHUNK) -> TwoStageSamples:
    """Video and two-stage replicates of `statistic` (see the module docstring).

    cluster_counts: (V, ...) per-video counts; unit_counts: (U, ...) per (video, trial) unit counts, whose sums
    over the units of each video are cluster_counts; unit_cluster: (U,) each unit's video. statistic maps sums
    (b, ...) float64 to (b, ...) values. `present` (bool (U, P), P the first trailing axis, e.g. groups): the
    unit holds rows of that group; a group then resamples, in each video, only the trials it was judged in
    (groups with the same units share their draws). Default: every unit counts for every group. Work runs in
    chunks of replicates; results do not depend on `chunk`.
    """
    counts, units = np.asarray(cluster_counts), np.asarray(unit_counts)
    if counts.ndim < 1 or units.shape[1:] != counts.shape[1:]:
        raise ValueError(f"unit_counts {units.shape} must have cluster_counts' trailing shape {counts.shape[1:]}")
    n_clusters, rest = counts.shape[0], counts.shape[1:]
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if n_clusters == 0:
        raise ValueError("cannot bootstrap zero clusters")
    unit_cluster = np.asarray(unit_cluster, dtype=np.int64)
    if unit_cluster.shape != units.shape[:1]:
        raise ValueError("unit_cluster needs one entry per unit")
    patterns = _patterns(units, unit_cluster, n_clusters, present)
    flat = counts.reshape(n_clusters, -1)
    # integer counts: every product below is exact, so blocks of fewer replicates give the same replicates
    most_trials = max((int(p.layout.n_trials.max()) for p in patterns), default=1)
    exact = (exact_sums(flat, n_clusters)
             and exact_sums(units.reshape(units.shape[0], -1), 2.0 * n_clusters * most_trials))
    chunk = replicate_block(chunk, 4 * (2 * n_clusters + sum(p.counts.shape[0] for p in patterns)), exact)
    dtype = np.float32 if _exact32(flat, n_clusters) else np.float64  # as capeval.kernels.bootstrap.cluster_bootstrap
    flat = np.ascontiguousarray(flat, dtype=dtype)
    members, offsets = strata_layout(n_clusters, strata)
    seed = check_seed(seed)
    size = min(chunk, n_resamples)
    video_w, scratch = np.empty((size, n_clusters), dtype=np.float32), np.empty((size, n_clusters), dtype=np.float32)
    trial_w = [np.empty((size, p.counts.shape[0]), dtype=np.float32) for p in patterns]
    no_trials, no_units = np.zeros(n_clusters, dtype=np.int64), np.empty((size, 0), dtype=np.float32)
    video = two = None
    for first in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - first)
        vw = video_w[:b]
        vw.fill(0.0)
        if not patterns:  # no video with two trials: the video draws alone
            _fill_two_stage(vw, no_units[:b], members, offsets, no_trials, no_trials, seed, first)
        for i, (pattern, tw) in enumerate(zip(patterns, trial_w)):
            target = vw if i == 0 else scratch[:b]  # every pattern draws the same videos
            target.fill(0.0)
            tw[:b].fill(0.0)
            _fill_two_stage(target, tw[:b], members, offsets, pattern.layout.unit_start, pattern.layout.n_trials,
                            seed, first)
        sums = (vw.astype(dtype, copy=False) @ flat).astype(np.float64)
        shifted = sums.copy()
        for pattern, tw in zip(patterns, trial_w):
            shift = np.zeros((b, pattern.counts.shape[1]))
            for lo, hi, scale in pattern.layout.blocks:  # integer products (exact), then one scaling per K
                shift += scale * (tw[:b, lo:hi].astype(pattern.counts.dtype, copy=False)
                                  @ pattern.counts[lo:hi]).astype(np.float64)
            shifted[:, pattern.columns] += shift
        values = [np.asarray(statistic(s.reshape((b,) + rest)), dtype=np.float64) for s in (sums, shifted)]
        if values[0].shape[0] != b:
            raise ValueError(f"statistic must keep the replicate axis: got shape {values[0].shape} for {b} replicates")
        if video is None:
            video = np.empty((n_resamples,) + values[0].shape[1:])
            two = np.empty_like(video)
        video[first:first + b], two[first:first + b] = values
    return TwoStageSamples(video, two)


@dataclass(frozen=True)
class JudgeNoise:
    replicates: np.ndarray  # (B, ...) two-stage replicates, video stage shrunk: percentile CIs come from these
    judge_noise_share: np.ndarray  # (...) Var(trial shift) / Var(video replicates) in [0, 1]; nan: no variance
    trial_variance: np.ndarray  # (...) Var(trial shift): the judge-noise variance J of the estimate
    video_variance: np.ndarray  # (...) Var(video replicates): the estimate's whole variance B + J


def judge_noise(estimate, samples: TwoStageSamples) -> JudgeNoise:
    """The judge-noise share and the two-stage replicates of a statistic (module docstring). `estimate` is the
    statistic on all data (shape of one replicate). Where the trial shift is identically 0 (no video with two or
    more trials) the replicates are the video replicates unchanged."""
    video, shift = samples.video, samples.two_stage - samples.video
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # all-nan slices: a statistic never defined
        total = np.nanvar(video, axis=0, ddof=1)
        noise = np.nanvar(shift, axis=0, ddof=1)
        share = np.where(total > 0, np.clip(noise / total, 0.0, 1.0), np.where(noise > 0, 1.0, np.nan))
    moved = np.nan_to_num(noise) > 0
    shrink = np.sqrt(1.0 - np.where(moved, share, 0.0))
    est = np.asarray(estimate, dtype=np.float64)
    replicates = np.where(moved, est + shrink * (video - est) + shift, video)
    return JudgeNoise(replicates, share, noise, total)
