"""`capeval bench kernels [--json] [--quick]`: the compiled core against same-process baselines.

aggregate: 1,000,000 verdicts (2,000 videos x 50 groups) into a (video, group, code) count table with the Cython
kernel, against Polars group_by(...).len() on the same columns and against copying the same input bytes.
bootstrap: per-group precision (positives / (positives + negatives)) with a 95% percentile CI from 10,000
video-resampling replicates, against scipy.stats.bootstrap(method='percentile', paired over videos) timed on
fewer groups and replicates and scaled linearly (said in "scipy_scaled_from"). two_stage: the same verdicts judged
in 3 judge trials (a trial id per row), the same precision and replicates with the two-stage bootstrap of
kernels/two_stage.py (videos, then each drawn video's trials; judge_noise_share), against the video bootstrap
above. Every phase is the best of a few repeats after a warm-up; the first call (Numba JIT compile or cache load)
is reported apart.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from capeval.benchmarks.targets import KERNELS, as_json, figures, targets_met, targets_table, verdicts
from capeval.kernels.aggregate import count_codes, count_codes_by_cluster
from capeval.kernels.bootstrap import cluster_bootstrap, percentile_ci
from capeval.kernels.two_stage import judge_noise, two_stage_bootstrap

POS, NEG, MISS = 1, 2, 0
N_CODES = 3


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _data(n_rows: int, n_videos: int, n_groups: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    videos = rng.integers(0, n_videos, n_rows, dtype=np.int32)
    groups = rng.integers(0, n_groups, n_rows, dtype=np.int32)
    codes = rng.choice(np.array([-1, MISS, POS, NEG], dtype=np.int8), n_rows, p=[0.02, 0.28, 0.45, 0.25])
    return videos, groups, codes


def _precision(counts: np.ndarray) -> np.ndarray:
    den = counts[..., POS] + counts[..., NEG]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, counts[..., POS] / den, np.nan)


def bench_aggregate(videos, groups, codes, n_videos, n_groups, repeats):
    import polars as pl

    def ours():
        return count_codes_by_cluster(videos, groups, codes, n_videos, n_groups, N_CODES)

    frame = pl.DataFrame({"video": videos, "group": groups, "code": codes})

    def polars():
        return frame.group_by(["video", "group", "code"]).len()

    def ours_groups():  # totals only (no video axis): the table fits in L1
        return count_codes(groups, codes, n_groups, N_CODES)

    def copy():
        return np.copy(videos), np.copy(groups), np.copy(codes)

    t0 = time.perf_counter()
    table = ours()
    first = time.perf_counter() - t0
    ref = polars()
    assert int(ref["len"].sum()) == int(table.sum()) == videos.size
    # ours and copy take milliseconds: many interleaved repeats, best of each, so load drift on a shared
    # machine hits both alike (a ratio of two bests taken minutes apart measures the neighbours, not us)
    fast = {"ours_s": ours, "ours_groups_only_s": ours_groups, "copy_s": copy}
    best = {k: float("inf") for k in fast}
    for _ in range(max(repeats, 1) * 6):
        for k, fn in fast.items():
            best[k] = min(best[k], _best(fn, 1))
    result = {**best, "polars_s": _best(polars, repeats), "fast_repeats_interleaved": max(repeats, 1) * 6,
              "first_call_s": first, "rows": int(videos.size), "input_bytes": int(videos.nbytes + groups.nbytes
                                                                                     + codes.nbytes)}
    result["vs_copy"] = result["ours_s"] / result["copy_s"]
    result["groups_only_vs_copy"] = result["ours_groups_only_s"] / result["copy_s"]
    result["table"] = (f"(videos={n_videos}, groups={n_groups}, codes={N_CODES}+1) int64 result, counted in uint8 "
                       f"cells, rows in random order")
    result["speedup_vs_polars"] = result["polars_s"] / result["ours_s"]
    return result, table


def bench_bootstrap(table, n_resamples, repeats, scipy_groups, scipy_resamples):
    from scipy import stats

    # precision reads two code columns; bootstrapping only those halves the BLAS work (scipy gets the same two)
    used = np.ascontiguousarray(table[..., [POS, NEG]])

    def precision_used(sums):
        den = sums[..., 0] + sums[..., 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, sums[..., 0] / den, np.nan)

    def ours():
        samples = cluster_bootstrap(used, precision_used, n_resamples, seed=0)
        return percentile_ci(samples, 0.95)

    def ours_all_columns():
        return percentile_ci(cluster_bootstrap(table, _precision, n_resamples, seed=0), 0.95)

    t0 = time.perf_counter()
    low, high = ours()
    first = time.perf_counter() - t0
    ours_s = _best(ours, repeats)
    all_columns_s = _best(ours_all_columns, max(1, repeats - 2))

    def scipy_one(g):
        pos = table[:, g, POS].astype(np.float64)
        neg = table[:, g, NEG].astype(np.float64)

        def stat(p, n, axis=-1):
            return p.sum(axis) / (p.sum(axis) + n.sum(axis))

        return stats.bootstrap((pos, neg), stat, paired=True, vectorized=True, n_resamples=scipy_resamples,
                               method="percentile", confidence_level=0.95, random_state=0).confidence_interval

    def scipy_run():
        return [scipy_one(g) for g in range(scipy_groups)]

    scipy_run()  # warm-up
    scipy_measured = _best(scipy_run, max(1, repeats - 1))
    n_groups = table.shape[1]
    scale = (n_groups / scipy_groups) * (n_resamples / scipy_resamples)
    scipy_s = scipy_measured * scale
    # the two CIs estimate the same interval: report the largest gap on the groups scipy ran
    ref = scipy_run()
    gap = max(max(abs(r.low - low[g]), abs(r.high - high[g])) for g, r in enumerate(ref))
    return {"ours_s": ours_s, "scipy_s": scipy_s, "speedup": scipy_s / ours_s, "first_call_s": first,
            "ours_all_code_columns_s": all_columns_s,
            "n_resamples": n_resamples, "clusters": int(table.shape[0]), "groups": int(n_groups),
            "scipy_measured_s": scipy_measured,
            "scipy_scaled_from": {"groups": scipy_groups, "n_resamples": scipy_resamples, "factor": scale},
            "max_ci_gap_vs_scipy": float(gap)}


def bench_two_stage(videos, groups, codes, n_videos, n_groups, n_resamples, repeats, n_trials=3):
    trials = np.random.default_rng(1).integers(0, n_trials, videos.size).astype(np.int32)
    units = count_codes_by_cluster(videos * n_trials + trials, groups, codes, n_videos * n_trials, n_groups, N_CODES)
    unit_video = np.repeat(np.arange(n_videos), n_trials)
    table = units.reshape(n_videos, n_trials, n_groups, N_CODES + 1).sum(1)
    used, used_units = (np.ascontiguousarray(t[..., [POS, NEG]]) for t in (table, units))

    def precision_used(sums):
        den = sums[..., 0] + sums[..., 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, sums[..., 0] / den, np.nan)

    estimate = precision_used(used.sum(0))

    def ours():
        noise = judge_noise(estimate, two_stage_bootstrap(used, used_units, unit_video, precision_used, n_resamples, 0))
        return percentile_ci(noise.replicates, 0.95), noise.judge_noise_share

    t0 = time.perf_counter()
    _, share = ours()
    first = time.perf_counter() - t0
    return {"ours_s": _best(ours, repeats), "first_call_s": first, "n_resamples": n_resamples,
            "clusters": n_videos, "trials_per_video": n_trials, "units": int(unit_video.size), "groups": n_groups,
            "judge_noise_share_median": float(np.nanmedian(share))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="capeval bench kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="100k verdicts, 1,000 resamples (a smoke run)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.quick:
        n_rows, n_videos, n_groups, n_resamples, scipy_groups, scipy_resamples = 100_000, 500, 10, 1000, 2, 200
    else:
        n_rows, n_videos, n_groups, n_resamples, scipy_groups, scipy_resamples = 1_000_000, 2000, 50, 10_000, 2, 1000
    videos, groups, codes = _data(n_rows, n_videos, n_groups)
    aggregate, table = bench_aggregate(videos, groups, codes, n_videos, n_groups, args.repeats)
    bootstrap = bench_bootstrap(table, n_resamples, args.repeats, scipy_groups, scipy_resamples)
    two_stage = bench_two_stage(videos, groups, codes, n_videos, n_groups, n_resamples, args.repeats)
    two_stage["vs_video_bootstrap"] = two_stage["ours_s"] / bootstrap["ours_s"]
    result = {
        "bootstrap": bootstrap,
        "two_stage": two_stage,
        "aggregate": aggregate,
    }
    result["targets_met"] = targets_met(KERNELS, result)
    result["machine"] = {"cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0], "quick": args.quick}
    found = verdicts(KERNELS, result)
    result["targets"] = as_json(found)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for phase in ("aggregate", "bootstrap", "two_stage"):
            print(figures(phase, result[phase]))
        print(targets_table(found, quick=args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
