"""`capeval bench adaptive [--json] [--quick]`: comparisons decided with fewer judge calls, on a simulated sweep with
known effects, against the full run of the same simulated verdicts.

The sweep: 21 systems (a baseline and 20 others) judged by CapQuiz on 2,000 videos of 4-16 items each. Each item's
verdict code is drawn from the system's known rates: P(correct) = sigmoid(a + effect_s + u_v) with u_v a per-video
difficulty every system shares (so differences are paired by video), and the rest split 40/60 between wrong and
cannot-determine. Effects (logit units) include four systems equal to the baseline and others from tiny to large.
Verdict rows go through CapQuiz's own paired statistic (its registered PairedSpec) and the metric is CapF1.

Per repetition (a seed: new verdicts, new judging order) the adaptive run (engine/sweep/decide.py: rounds of
videos in a seeded order, each pair system-vs-baseline stopped when its confidence sequence excludes 0 or lies
inside +-delta, a system judged until its pairs stopped) is compared with the full run of the same verdicts:

  agreement             share of pairs whose decision agrees with the full run's difference (a - b > 0 / < 0 for
                        "decided", |a - b| < delta for "equivalent")
  coverage              share of pairs whose sequence held the full run's difference after every round it was read
  requests_saved_share  1 - (items judged over all systems) / (items of the full run): one request per item
  early_share           share of pairs stopped before the last round

Targets: agreement >= 1 - alpha, coverage >= 1 - alpha, requests_saved_share >= 0.40. `--pairs all` compares every
two systems instead (reported, not a target: a system is then judged until its closest rival is told apart).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from capeval.benchmarks.targets import ADAPTIVE, as_json, figures, targets_met, targets_table, verdicts
from capeval.engine.protocols.capquiz.codes import CapQuizVerdict
from capeval.engine.registry import lookup
from capeval.engine.sweep.decide import (ALL_PAIRS, DecideSpec, Decider, OPEN, agrees, metric_span, metric_statistic,
                                         plan_pairs, round_sizes)

#: logit-scale effects of the 20 systems against the baseline (0: equal to it)
EFFECTS = (0.0, 0.0, 0.0, 0.0, 0.02, -0.03, 0.05, -0.06, 0.08, -0.1, 0.12, 0.15, -0.2, 0.25, 0.3, -0.35, 0.45,
           0.6, -0.8, 1.0)
BASE_LOGIT = 0.2
WRONG_SHARE = 0.4


def simulate_stats(n_videos: int, rng: np.random.Generator, spec) -> tuple[np.ndarray, np.ndarray]:
    """(systems, videos, 1 task, S) CapQuiz statistics per video from simulated verdict rows, and items per video."""
    import polars as pl

    effects = np.concatenate([[0.0], EFFECTS])
    k = rng.integers(4, 17, n_videos)
    u = rng.normal(0.0, 1.0, n_videos)
    video_of_item = np.repeat(np.arange(n_videos), k)
    n_items = video_of_item.size
    logits = BASE_LOGIT + effects[:, None] + u[video_of_item][None, :]
    draw = rng.random((effects.size, n_items))
    p_correct = 1.0 / (1.0 + np.exp(-logits))
    wrong = draw < p_correct + (1.0 - p_correct) * WRONG_SHARE
    codes = np.where(draw < p_correct, int(CapQuizVerdict.CORRECT),
                     np.where(wrong, int(CapQuizVerdict.WRONG), int(CapQuizVerdict.CANNOT_DETERMINE)))
    rows = pl.DataFrame({"system": np.repeat(np.arange(effects.size), n_items),
                         "video": np.tile(video_of_item, effects.size), "verdict": codes.ravel()})
    cols = [f"_s{j}" for j in range(spec.n_stats)]
    per = spec.stats(rows, {}).group_by(["system", "video"]).agg(pl.col(cols).sum())
    out = np.zeros((effects.size, n_videos, 1, spec.n_stats))
    out[per["system"].to_numpy(), per["video"].to_numpy(), 0] = per.select(cols).to_numpy()
    return out, k


def one_run(stats: np.ndarray, items: np.ndarray, pairs: list[tuple[int, int]], statistic, dspec, span: float,
            rng: np.random.Generator) -> dict:
    """The adaptive run on one set of simulated verdicts, scored against the full run of the same verdicts."""
    n_sys, n_videos = stats.shape[:2]
    order = rng.permutation(n_videos)
    ordered = stats[:, order]
    decider = Decider(n_sys, pairs, statistic, n_videos, dspec, span)
    judged_until = np.zeros(n_sys, dtype=np.int64)
    for t in round_sizes(n_videos, dspec):
        active = decider.open_systems()
        if not active:
            break
        judged_until[list(active)] = t
        decider.update(t, {i: ordered[i, :t] for i in active})
    full = np.array([float(statistic(stats[i].sum(0)[None])[0]) for i in range(n_sys)])
    cum_items = np.concatenate([[0], np.cumsum(items[order])])
    judged = cum_items[judged_until].sum()
    agree, cover, early = [], [], []
    for p in decider.pairs:
        truth = full[p.a] - full[p.b]
        agree.append(agrees(p, truth, dspec.delta) and p.status != OPEN)
        cover.append(all(lo <= truth <= hi for _, _, lo, hi in p.history))
        early.append(p.early)
    return {"agree": agree, "cover": cover, "early": early, "judged_items": int(judged),
            "full_items": int(items.sum()) * n_sys,
            "stopped_at": [p.videos for p in decider.pairs], "truth": [full[p.a] - full[p.b] for p in decider.pairs]}


def run(n_videos: int, repeats: int, delta: float, alpha: float, all_pairs: bool, seed: int = 0) -> dict:
    spec = lookup("protocol", "capquiz").paired_spec("strict")
    statistic = metric_statistic(spec, "CapF1")
    span = metric_span(statistic, 1, spec.n_stats, spec.scale)
    n_sys = len(EFFECTS) + 1
    systems = [{"captioner": "sim", "prompt_id": "baseline" if i == 0 else f"s{i}", "frame_spec": "f"}
               for i in range(n_sys)]
    pairs, _ = plan_pairs(systems, ALL_PAIRS if all_pairs else "prompt_id=baseline")
    dspec = DecideSpec("CapF1", ALL_PAIRS if all_pairs else "prompt_id=baseline", delta, alpha)
    t0 = time.perf_counter()
    runs = []
    for r in range(repeats):
        rng = np.random.default_rng([seed, r])
        stats, items = simulate_stats(n_videos, rng, spec)
        runs.append(one_run(stats, items, pairs, statistic, dspec, span, rng))
    agree = np.concatenate([x["agree"] for x in runs])
    cover = np.concatenate([x["cover"] for x in runs])
    early = np.concatenate([x["early"] for x in runs])
    judged = sum(x["judged_items"] for x in runs)
    total = sum(x["full_items"] for x in runs)
    truth = np.abs(np.concatenate([x["truth"] for x in runs]))
    return {
        "agreement": float(agree.mean()), "coverage": float(cover.mean()),
        "requests_saved_share": 1.0 - judged / total, "early_share": float(early.mean()),
        "runs_all_agree_share": float(np.mean([all(x["agree"]) for x in runs])),
        "pairs": len(pairs), "pair_decisions": int(agree.size), "repeats": repeats, "systems": n_sys,
        "videos": n_videos, "delta": delta, "alpha": alpha, "metric": "CapF1", "span": span,
        "mean_stop_share_by_true_gap": _by_gap(truth, np.concatenate([x["stopped_at"] for x in runs]) / n_videos,
                                               delta),
        "requests_judged": int(judged), "requests_full": int(total), "seconds": time.perf_counter() - t0,
    }


def _by_gap(truth: np.ndarray, stop_share: np.ndarray, delta: float) -> dict:
    """Mean share of the videos judged before a pair stopped, by its full-run |difference| in units of delta."""
    edges = [0.0, 0.5, 1.0, 2.0, 4.0, np.inf]
    out = {}
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (truth >= lo * delta) & (truth < hi * delta)
        if m.any():
            out[f"{lo:g}-{hi:g} delta"] = round(float(stop_share[m].mean()), 3)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="capeval bench adaptive", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="20 repetitions, no all-pairs run (a few seconds)")
    parser.add_argument("--repeats", type=int, default=None, help="repetitions (default 100; --quick 20)")
    parser.add_argument("--videos", type=int, default=2000)
    parser.add_argument("--delta", type=float, default=2.0, help="equivalence margin, CapF1 points (default 2)")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--pairs", choices=("baseline", "all"), default="baseline")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    repeats = args.repeats or (20 if args.quick else 100)
    result = run(args.videos, repeats, args.delta, args.alpha, args.pairs == "all", args.seed)
    result["baseline"] = "the full run of the same simulated verdicts (every system on every video)"
    if not args.quick and args.pairs == "baseline":  # the other pair plan, for reading (not a target)
        other = run(args.videos, max(1, repeats // 4), args.delta, args.alpha, True, args.seed)
        result["all_pairs"] = {k: other[k] for k in ("agreement", "coverage", "requests_saved_share", "pairs",
                                                     "repeats", "seconds")}
    result["targets_met"] = targets_met(ADAPTIVE, result)
    result["machine"] = {"cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0], "quick": args.quick}
    found = verdicts(ADAPTIVE, result)
    result["targets"] = as_json(found)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(figures("adaptive", result))
        print(figures("stop share by true gap", result["mean_stop_share_by_true_gap"]))
        print(targets_table(found, quick=args.quick))
    return 0 if all(result["targets_met"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
