"""Anytime-valid confidence sequences for a mean over a finite population sampled without replacement, and the
per-video linearisation that turns a metric of summed statistics into such a mean.

Used by adaptive sweeps (engine/sweep/decide.py): videos are judged in a seeded random order, and after every
round each paired difference of a metric gets an interval that holds *at every round at once* with probability
>= 1 - alpha, so a comparison may stop as soon as its interval excludes 0 or lies within +-delta, however often
it was looked at. (A fixed-sample interval looked at after every round would not: peeking inflates its error.)

The sequence (`wor_mixture_cs`)
-------------------------------
The population is the N videos of the dataset and the target is the mean mu of a per-video value x_v over ALL N
(the full run's number); the first t videos of a uniformly random order are x_1..x_t. Sampling without replacement
(Waudby-Smith & Ramdas 2020, "Confidence sequences for sampling without replacement", NeurIPS, section 3): given the
past, the next value's expectation is the mean of the values not yet seen, (N mu - S_{i-1}) / (N - i + 1), with
S_{i-1} = x_1 + ... + x_{i-1}. So

    D_i(mu) = x_i - (N mu - S_{i-1}) / (N - i + 1)       is a martingale difference at the true mu, and
    M_t(mu) = sum_{i<=t} D_i(mu) = A_t - mu W_t,  A_t = sum_i (x_i + S_{i-1} / (N - i + 1)),  W_t = sum_i N / (N - i + 1).

A Robbins normal-mixture boundary (the mixture over lambda ~ N(0, rho^2) of exp(lambda M - lambda^2 V / 2), a
nonnegative supermartingale for a Gaussian-like martingale with variance process V, and Ville's inequality):

    |M_t| <= sigma_t sqrt( 2 (t rho^2 + 1) / rho^2 * log( sqrt(t rho^2 + 1) / alpha ) )      for all t, w.p. >= 1 - alpha,

with the variance plug-in sigma_t^2 of the asymptotic confidence sequences of Waudby-Smith, Arbour, Sinha, Kennedy
& Ramdas (2024), "Time-uniform central limit theory and asymptotic confidence sequences", Ann. Statist. (their
Theorem 2.2 and the tuning rho = sqrt((-2 log alpha + log(-2 log alpha + 1)) / t_star), tightest near t_star).
Solving for mu gives the interval (A_t -+ B_t) / W_t. Without replacement W_t grows faster than t (W_N = N H_N), so
the interval narrows faster than 1/sqrt(t) as the sample approaches the population; with N -> infinity it is their
iid sequence, mean_t +- B_t / t.

Variance: sigma_t^2 = (prior_var + sum_i (x_i - mean_t)^2) / (t + 1), i.e. the sample variance with ONE pseudo-
observation of variance `prior_var`. The caller passes the variance of the widest values the metric allows (the
bounds below): early rounds where every difference happened to be equal (sample variance 0) then cannot claim a
zero-width interval; the pseudo-observation's weight fades as 1/t.

Assumptions (say them when you read a decision): (1) videos are judged in a uniformly random order (the sweep's
seeded permutation); (2) the per-video values are bounded (so the variance exists and the plug-in converges; the
bounds used per metric kind are in engine/sweep/decide.py: a metric's extreme values over one verdict code, e.g.
[0, 100] for shares of items, [1, 5] for a 1-5 quality score, times the largest video's share of the items);
(3) the guarantee is asymptotic (Waudby-Smith et al.'s "asymptotic confidence sequence": the error of the normal
approximation vanishes as t grows), not a finite-sample bound; decisions therefore start after a minimum number of
videos. tests/kernels/test_sequential.py measures the time-uniform coverage on simulated populations.

The linearisation (`linearise`)
-------------------------------
A metric is a smooth function f of the summed per-video statistics (capeval.engine.metrics.paired.PairedSpec), e.g. a
ratio sum(num) / sum(den), not a mean of per-video values. Its first-order (delta-method) expansion around the
current estimate of the population sums S^ = N * mean_t(s) makes it one:

    psi_v = f(S^) + N * grad f(S^) . (s_v - mean_t(s)),          mean over all N videos of psi = f(S) + O(|S - S^|^2).

For a ratio R = sum(num) / sum(den) this is psi_v = R^ + (num_v - R^ den_v) / mean(den): the per-video residual of
the running ratio, scaled by the mean denominator -- and with the true mean denominator its population mean is R
exactly, whatever R^ is. A paired difference uses psi_a(v) - psi_b(v) on the same videos. The gradient is taken by
central differences (metrics are vectorised NumPy functions of the sums); undefined entries (0/0) count as 0.

Pure NumPy: a sequence over t values costs a few cumulative sums.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def mixture_rho(alpha: float, t_star: float) -> float:
    """The normal mixture's rho that makes the boundary tightest near t_star observations (Waudby-Smith et al.)."""
    la = -2.0 * np.log(alpha)
    return float(np.sqrt((la + np.log(la + 1.0)) / max(float(t_star), 1.0)))


def mixture_radius(t: np.ndarray, sigma: np.ndarray, alpha: float, rho: float) -> np.ndarray:
    """The bound on |M_t|: sigma sqrt(2 (t rho^2 + 1) / rho^2 log(sqrt(t rho^2 + 1) / alpha))."""
    v = np.asarray(t, dtype=np.float64) * rho * rho + 1.0
    return sigma * np.sqrt(2.0 * v / (rho * rho) * np.log(np.sqrt(v) / alpha))


def wor_mixture_cs(x: np.ndarray, n_population: int, *, alpha: float = 0.05, t_star: float | None = None,
                   prior_var: float | np.ndarray = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The confidence sequence for the population mean after each of the first t = 1..T values.

    x: (T,) or (P, T) -- P sequences (e.g. pairs) sampled in the same order, T <= n_population. prior_var: the
    variance of one pseudo-observation, scalar or (P,). t_star: where the boundary is tightest (default
    n_population / 4). Returns (estimate, low, high), each shaped like x: the without-replacement estimate A_t / W_t
    and the interval's ends at every t."""
    x = np.asarray(x, dtype=np.float64)
    one = x.ndim == 1
    x = np.atleast_2d(x)
    n_seq, n_t = x.shape
    n = int(n_population)
    if n_t > n:
        raise ValueError(f"{n_t} values from a population of {n}")
    t = np.arange(1, n_t + 1, dtype=np.float64)
    left = n - t + 1.0  # values not yet seen before the i-th, the i-th included
    before = np.concatenate([np.zeros((n_seq, 1)), np.cumsum(x, axis=1)[:, :-1]], axis=1)  # S_{i-1}
    a = np.cumsum(x + before / left, axis=1)
    w = np.cumsum(n / left)
    mean = np.cumsum(x, axis=1) / t
    sq = np.cumsum(x * x, axis=1) - t * mean * mean  # sum of squared deviations from the running mean
    prior = np.broadcast_to(np.asarray(prior_var, dtype=np.float64), (n_seq,))[:, None]
    sigma = np.sqrt(np.maximum(sq, 0.0) + prior) / np.sqrt(t + 1.0)
    rho = mixture_rho(alpha, t_star if t_star is not None else n / 4.0)
    radius = mixture_radius(t, sigma, alpha, rho)
    est, low, high = a / w, (a - radius) / w, (a + radius) / w
    return (est[0], low[0], high[0]) if one else (est, low, high)


def numeric_gradient(f: Callable[[np.ndarray], np.ndarray], point: np.ndarray) -> np.ndarray:
    """d f / d point by central differences, point of any shape (f: array of that shape -> scalar; vectorised over
    leading axes, so all 2 * size perturbed copies are evaluated in one call). nan (undefined) entries become 0."""
    point = np.asarray(point, dtype=np.float64)
    size = point.size
    h = 1e-6 * np.maximum(np.abs(point.ravel()), 1.0)
    steps = np.zeros((2 * size, size))
    idx = np.arange(size)
    steps[idx, idx] = h
    steps[size + idx, idx] = -h
    values = np.asarray(f((point.ravel()[None, :] + steps).reshape((2 * size,) + point.shape)), dtype=np.float64)
    grad = (values[:size] - values[size:]) / (2.0 * h)
    return np.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0).reshape(point.shape)


def linearise(f: Callable[[np.ndarray], np.ndarray], stats: np.ndarray, n_population: int) -> tuple[np.ndarray, float]:
    """Per-video linearised values psi_v (t,) of a metric f of summed statistics, and f at the estimated population
    sums. stats: (t, ...) per-video statistics of the t videos judged so far (f takes the summed (...) array)."""
    stats = np.asarray(stats, dtype=np.float64)
    mean = stats.mean(axis=0)
    point = mean * float(n_population)
    value = float(np.asarray(f(point[None]), dtype=np.float64)[0])
    if not np.isfinite(value):
        return np.full(stats.shape[0], np.nan), value
    grad = numeric_gradient(f, point)
    dev = (stats - mean[None]).reshape(stats.shape[0], -1)
    return value + float(n_population) * dev @ grad.ravel(), value
