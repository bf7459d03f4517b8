"""Comparisons decided with fewer judge calls: `[options] decide = { metric = "CapF1", baseline = "prompt_id=brief",
delta = 1.0, alpha = 0.05 }`.

The videos of each dataset are judged in a seeded random order, in rounds (engine/sweep/decide_rounds.py runs them
in a sweep). After each round every paired difference of `metric` between two systems (cells of the same dataset,
protocol and judge) gets an anytime-valid confidence sequence (kernels/sequential.py: a normal-mixture boundary on
the without-replacement martingale of per-video linearised differences, clustered by video), and a pair stops when

    its interval excludes 0            -> "decided"     (direction: a - b > 0 or < 0), or
    its interval lies inside +-delta   -> "equivalent"  (the difference is smaller than delta either way).

A system stops being judged when all its pairs have stopped; its cell keeps the videos judged so far and is
committed as `pending` (a later run without `decide` finishes it, sending only what the judgment cache lacks).
With every video judged the interval is the full run's difference itself, so nothing is ever left undecided.

Pairs: `baseline = "all-pairs"` compares every two systems of a (dataset, protocol, judge); a selector
(`captioner=x,prompt_id=y`, or a bare value matching any of captioner, prompt id, frame spec) names the baseline
system of each such group and compares every other system with it (a = the system, b = the baseline).

Bounds (the confidence sequence's assumption of bounded per-video differences; they also set the prior pseudo-
observation's variance, span^2): a metric's span is the spread of its values over videos whose every item got the
same verdict code -- [0, 100] for shares of items (precision, recall, F1, accuracy), [1, 5] for a
1-5 mean score -- and, for statistics that are not verdict codes (event counts), [0, scale].
A per-video difference of two values in a span lies within +-span; linearised ratios can exceed it by the largest
video's share of the items (kernels/sequential.py).

alpha is per pair (each pair's sequence covers its difference at all times with probability >= 1 - alpha); with
many pairs read together, expect about alpha of them to be wrong, or lower alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from capeval.kernels.sequential import linearise, wor_mixture_cs

PENDING = "pending"  # cell_status of a cell whose judging an adaptive sweep stopped early (not finished)
ALL_PAIRS = "all-pairs"
OPEN, DECIDED, EQUIVALENT = "open", "decided", "equivalent"
UNDEFINED = "undefined"  # every video judged and the metric still undefined for a system (e.g. a 0/0)
FACTORS = ("captioner", "prompt_id", "frame_spec")

#: key -> (types, required) of the `decide` table
_KEYS = {"metric": (str, True), "baseline": (str, True), "delta": ((int, float), True), "alpha": ((int, float), False),
         "seed": (int, False), "rounds": (int, False), "min_videos": (int, False)}


@dataclass(frozen=True)
class DecideSpec:
    metric: str
    baseline: str  # ALL_PAIRS or a system selector
    delta: float
    alpha: float = 0.05
    seed: int = 0  # the order videos are judged in
    rounds: int = 20  # each dataset's videos in this many rounds (the first at least min_videos)
    min_videos: int = 100  # no decision before this many videos (the sequence is asymptotic)


def parse_decide(checker, raw) -> DecideSpec | None:
    """The `[options] decide` table, its problems reported to the sweep file's checker (file, line, field)."""
    where = "options.decide"
    if not checker.table(raw, _KEYS, where):
        return None
    values = {k: raw[k] for k in _KEYS if k in raw and checker.good(raw, k, _KEYS)}
    bad = len(checker.problems)
    if not values.get("metric", "").strip():
        checker.fail(f"{where}.metric", "must name a headline metric of the protocols (e.g. \"CapF1\")", "metric")
    if not values.get("baseline", "").strip():
        checker.fail(f"{where}.baseline", f"a system selector (e.g. \"prompt_id=brief\") or {ALL_PAIRS!r}",
                     "baseline")
    if "delta" in values and not (values["delta"] > 0 and math.isfinite(values["delta"])):
        checker.fail(f"{where}.delta", f"must be > 0 (in the metric's units), got {values['delta']}", "delta")
    if "alpha" in values and not 0 < values["alpha"] < 1:
        checker.fail(f"{where}.alpha", f"must be between 0 and 1, got {values['alpha']}", "alpha")
    for key in ("rounds", "min_videos"):
        if key in values and values[key] < 1:
            checker.fail(f"{where}.{key}", f"must be >= 1, got {values[key]}", key)
    if len(checker.problems) > bad or not {"metric", "baseline", "delta"} <= set(values):
        return None
    return DecideSpec(values["metric"].strip(), values["baseline"].strip(), float(values["delta"]),
                      **{k: (float(v) if k == "alpha" else v) for k, v in values.items()
                         if k in ("alpha", "seed", "rounds", "min_videos")})


def video_order(videos, seed: int, salt: str = "") -> list[str]:
    """The order videos are judged in: a permutation of the sorted ids, seeded by `seed` and `salt` (the dataset)."""
    import hashlib

    ids = sorted(set(videos))
    digest = hashlib.sha256(f"{seed}:{salt}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return [ids[i] for i in rng.permutation(len(ids))]


def round_sizes(n_videos: int, spec: DecideSpec) -> list[int]:
    """Videos judged after each round: equal steps of n / rounds, the first at least min_videos, the last all."""
    step = max(1, math.ceil(n_videos / spec.rounds))
    first = min(n_videos, max(step, spec.min_videos))
    return list(range(first, n_videos, step)) + [n_videos]


def matches(system: dict, selector: str) -> bool:
    """`captioner=x,prompt_id=y` (every given key must match) or a bare value matching any factor."""
    for part in selector.split(","):
        key, sep, value = (s.strip() for s in part.partition("="))
        if sep and str(system.get(key)) != value:
            return False
        if not sep and key and key not in {str(system.get(c)) for c in FACTORS}:
            return False
    return True


def plan_pairs(systems: list[dict], baseline: str) -> tuple[list[tuple[int, int]], str | None]:
    """(a, b) index pairs among one group's systems, and why none when there are none. Baseline mode: a is each
    other system, b the baseline; all-pairs: a before b in the given order."""
    if len(systems) < 2:
        return [], "a single system: nothing to compare"
    if baseline == ALL_PAIRS:
        return [(i, j) for i in range(len(systems)) for j in range(i + 1, len(systems))], None
    hits = [i for i, s in enumerate(systems) if matches(s, baseline)]
    if len(hits) != 1:
        found = "no system" if not hits else f"{len(hits)} systems"
        return [], f"baseline {baseline!r} matches {found} (it must match exactly one)"
    return [(i, hits[0]) for i in range(len(systems)) if i != hits[0]], None


def metric_span(statistic, n_tasks: int, n_stats: int, scale: float) -> float:
    """The spread of the metric over videos whose every item got one verdict code (the one-hot statistics of
    capeval.engine.metrics.paired.code_stats); [0, scale] when fewer than two such values are defined."""
    values = []
    with np.errstate(all="ignore"):
        for k in range(n_stats):
            sums = np.zeros((1, n_tasks, n_stats))
            sums[..., k] = 1.0
            v = float(np.asarray(statistic(sums))[0])
            if np.isfinite(v):
                values.append(v)
    return max(values) - min(values) if len(values) >= 2 and max(values) > min(values) else float(scale)


@dataclass
class Pair:
    a: int
    b: int
    status: str = OPEN
    direction: int = 0  # +1: a - b > 0, -1: < 0 (decided only)
    videos: int = 0  # videos judged when it stopped (or at the last update)
    estimate: float = float("nan")
    low: float = float("-inf")
    high: float = float("inf")
    early: bool = False  # stopped before every video was judged
    history: list = field(default_factory=list)  # (videos, estimate, low, high) after each update


class Decider:
    """The pairs of one (dataset, protocol, judge) group and their confidence sequences. `statistic` maps summed
    statistics (..., T, S) to the metric (...); `update(t, stats)` takes each system's per-video statistics
    (t, T, S) of the first t videos of the order (systems with no open pair may be left out)."""

    def __init__(self, n_systems: int, pairs: list[tuple[int, int]], statistic, n_videos: int, spec: DecideSpec,
                 span: float):
        self.n_systems, self.statistic, self.n_videos, self.spec = n_systems, statistic, n_videos, spec
        self.pairs = [Pair(a, b) for a, b in pairs]
        self.prior_var = float(span) ** 2  # one pseudo-observation at the widest differences' variance

    def open_systems(self) -> set[int]:
        return {i for p in self.pairs if p.status == OPEN for i in (p.a, p.b)}

    def update(self, t: int, stats: dict[int, np.ndarray]) -> list[Pair]:
        """Update every open pair after t videos; returns the pairs that stopped now."""
        full = t >= self.n_videos
        psi, value = {}, {}
        for i in self.open_systems():
            s = np.asarray(stats[i], dtype=np.float64)[:t]
            if full:  # the full run: the metric of the sums themselves, no approximation
                value[i] = float(np.asarray(self.statistic(s.sum(0)[None]))[0])
            else:
                psi[i], value[i] = linearise(self.statistic, s, self.n_videos)
        stopped = []
        for p in self.pairs:
            if p.status != OPEN:
                continue
            if full:
                est = lo = hi = value[p.a] - value[p.b]
            else:
                x = psi[p.a] - psi[p.b]
                if not np.all(np.isfinite(x)):  # the metric is undefined so far (e.g. no verdict): wait
                    p.videos = t
                    continue
                e, lo_, hi_ = wor_mixture_cs(x, self.n_videos, alpha=self.spec.alpha, prior_var=self.prior_var)
                est, lo, hi = float(e[-1]), float(lo_[-1]), float(hi_[-1])
            p.videos, p.estimate, p.low, p.high = t, est, lo, hi
            p.history.append((t, est, lo, hi))
            if not full and t < self.spec.min_videos:
                continue
            if lo > 0 or hi < 0:
                p.status, p.direction = DECIDED, 1 if lo > 0 else -1
            elif -self.spec.delta < lo and hi < self.spec.delta:
                p.status = EQUIVALENT
            elif full:  # a difference of exactly 0 over every video, or none (the metric is undefined)
                p.status = EQUIVALENT if est == 0 else UNDEFINED
            if p.status != OPEN:
                p.early = not full
                stopped.append(p)
        return stopped


def agrees(pair: Pair, truth: float, delta: float) -> bool:
    """Whether a stopped pair's decision is right about the full run's difference `truth`."""
    if pair.status == DECIDED:
        return truth * pair.direction > 0
    if pair.status == EQUIVALENT:
        return abs(truth) < delta
    return True  # open: no claim made


def metric_statistic(spec, metric: str):
    """(summed statistics (..., T, S) -> the metric (...)) of a protocol's PairedSpec: the metric per task,
    averaged over the tasks where it is defined, in the spec's display scale -- as `capeval compare` reads it."""
    fn = spec.metrics[metric]

    def statistic(sums: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = np.asarray(fn(np.asarray(sums, dtype=np.float64)), dtype=np.float64)
            ok = np.isfinite(vals)
            n = ok.sum(axis=-1)
            mean = np.where(ok, vals, 0.0).sum(axis=-1) / np.where(n > 0, n, 1)
        return np.where(n > 0, mean, np.nan) * spec.scale

    return statistic
