"""Human alignment of caption metrics: rank correlations with human scores, rater agreement, synthetic negatives.

* `correlate(metric, human)`: Kendall τ_b and τ_c and Spearman ρ between a metric's per-caption scores and the
  mean human score, plus the VATEX-EVAL protocol (Shi et al., EMScore, CVPR 2022; `compute_correlation_uniquehuman`
  in github.com/shiyaya/emscore): correlate the metric with *each annotator's* scores separately (scipy's
  kendalltau = τ_b, spearmanr) and average over annotators, as papers on caption metrics report τ_b and τ_c on
  VATEX-Eval. EMScore also rounds the metric to 4 decimals first (and the averages after): off by default
  here (`round_decimals=4` turns it on), since it changes τ_b by up to 0.0014 on VATEX-EVAL's BLEU-1.
* `align(table, score_column, rating_columns, ...)`: the whole `capeval align` computation on a joined table, with
  percentile bootstrap CIs that resample videos.
* `gwet_ac1(ratings)`: Gwet's AC1 agreement among raters (Gwet 2008, "Computing inter-rater reliability and its
  variance in the presence of high agreement", BJMSP 61), multi-rater form; tolerant of missing ratings (NaN).
* `swap_caption(caption, swaps, seed)`: negatives for training or checking a judge are captions with controlled
  factual errors, made by replacing objects and actions; this swaps whole words/phrases from a given table,
  deterministically.

Correlations use capeval.kernels.correlation (O(n log n) Numba, exact tie handling; the tests check them against scipy).
"""

from __future__ import annotations

import re

import numpy as np

from capeval.kernels.correlation import kendall_tau_b, kendall_tau_c, spearman_rho


def _clean(metric, human) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(metric, dtype=np.float64)
    h = np.asarray(human, dtype=np.float64)
    if h.ndim == 1:
        h = h[:, None]
    if x.ndim != 1 or h.ndim != 2 or h.shape[0] != x.shape[0]:
        raise ValueError(f"metric must be (n,) and human (n,) or (n, annotators); got {x.shape} and {h.shape}")
    return x, h


def correlate(metric, human, *, round_decimals: int | None = None) -> dict[str, float]:
    """Rank correlations of `metric` (n,) with `human` (n,) or (n, annotators); NaN human ratings are skipped
    pairwise. Keys: kendall_tau_b, kendall_tau_c, spearman_rho (against the mean human score) and
    kendall_tau_b_per_annotator, spearman_rho_per_annotator (VATEX-EVAL: per annotator, then averaged), n."""
    x, h = _clean(metric, human)
    if round_decimals is not None:
        x = np.round(x, round_decimals)  # as EMScore's script does before correlating
    ok = np.isfinite(x)
    with np.errstate(invalid="ignore"):
        mean_h = np.nanmean(np.where(np.isfinite(h), h, np.nan), axis=1) if h.size else np.full(x.shape, np.nan)
    both = ok & np.isfinite(mean_h)
    out = {
        "kendall_tau_b": kendall_tau_b(x[both], mean_h[both]) if both.sum() > 1 else float("nan"),
        "kendall_tau_c": kendall_tau_c(x[both], mean_h[both]) if both.sum() > 1 else float("nan"),
        "spearman_rho": spearman_rho(x[both], mean_h[both]) if both.sum() > 1 else float("nan"),
    }
    taus, rhos = [], []
    for a in range(h.shape[1]):
        m = ok & np.isfinite(h[:, a])
        if m.sum() > 1:
            taus.append(kendall_tau_b(x[m], h[m, a]))
            rhos.append(spearman_rho(x[m], h[m, a]))
    out["kendall_tau_b_per_annotator"] = float(np.mean(taus)) if taus else float("nan")
    out["spearman_rho_per_annotator"] = float(np.mean(rhos)) if rhos else float("nan")
    out["kendall_tau_c_per_annotator"] = float(np.mean(
        [kendall_tau_c(x[ok & np.isfinite(h[:, a])], h[ok & np.isfinite(h[:, a]), a]) for a in range(h.shape[1])
         if (ok & np.isfinite(h[:, a])).sum() > 1])) if taus else float("nan")
    out["n"] = int(both.sum())
    return out


HEADLINE = {"tau_b": "kendall_tau_b_per_annotator", "rho": "spearman_rho_per_annotator",
            "tau_c": "kendall_tau_c_per_annotator", "tau_b_mean_human": "kendall_tau_b",
            "rho_mean_human": "spearman_rho", "tau_c_mean_human": "kendall_tau_c"}


def align(metric, human, videos, *, round4: bool = False, n_resamples: int = 1000, seed: int = 0,
          confidence: float = 0.95) -> dict:
    """`capeval align`'s figures for metric (n,) against human (n, annotators), rows grouped by `videos` (n,).

    Headline (EMScore's per-annotator protocol): tau_b, rho (and tau_c) = mean over annotators of the correlation
    with that annotator's column; `*_mean_human` against the mean rating. Fractions, unrounded unless `round4`
    (EMScore: metric rounded to 4 decimals before, averages after). `ci` holds percentile bootstrap intervals that
    resample whole videos (all candidates of a drawn video enter together), `n_resamples` = 0 for none."""
    x, h = _clean(metric, human)
    videos = np.asarray(videos)
    if videos.shape[0] != x.shape[0]:
        raise ValueError(f"videos must have one entry per row: {videos.shape[0]} for {x.shape[0]} rows")
    rnd = 4 if round4 else None
    point = correlate(x, h, round_decimals=rnd)
    out = {k: point[v] for k, v in HEADLINE.items()}
    if round4:
        out = {k: float(np.round(v, 4)) for k, v in out.items()}
    out["n"] = int(point["n"])
    _, cluster = np.unique(videos, return_inverse=True)
    out["n_videos"] = int(cluster.max() + 1) if cluster.size else 0
    out["ci"] = {}
    if n_resamples and out["n_videos"] > 1:
        rng = np.random.default_rng(seed)
        reps = {k: [] for k in HEADLINE}
        index = np.arange(x.shape[0])
        for _ in range(int(n_resamples)):
            counts = np.bincount(rng.integers(0, out["n_videos"], out["n_videos"]), minlength=out["n_videos"])
            rows = np.repeat(index, counts[cluster])  # each row as often as its video was drawn
            r = correlate(x[rows], h[rows], round_decimals=rnd)
            for k, v in HEADLINE.items():
                reps[k].append(r[v])
        alpha = (1.0 - confidence) / 2.0
        for k, values in reps.items():
            values = np.asarray(values)
            values = values[np.isfinite(values)]
            out["ci"][k] = [float(np.quantile(values, alpha)), float(np.quantile(values, 1.0 - alpha))] \
                if values.size else [None, None]
    return out


def gwet_ac1(ratings, categories=None) -> float:
    """Gwet's AC1 for `ratings` (items, raters) of nominal categories; NaN (or None) = not rated.

        p_a = mean over items rated by >= 2 raters of Σ_k r_ik (r_ik − 1) / (r_i (r_i − 1))
        π_k = mean over rated items of r_ik / r_i
        p_e = Σ_k π_k (1 − π_k) / (q − 1)
        AC1 = (p_a − p_e) / (1 − p_e)
    with r_ik the raters putting item i in category k, r_i the raters of item i, q the number of categories
    (`categories`, default: those observed)."""
    r = np.asarray(ratings, dtype=np.float64)
    if r.ndim != 2:
        raise ValueError(f"ratings must be (items, raters); got shape {r.shape}")
    cats = np.unique(r[np.isfinite(r)]) if categories is None else np.asarray(categories, dtype=np.float64)
    q = len(cats)
    if q < 2:
        raise ValueError(f"Gwet's AC1 needs at least 2 categories; got {q}")
    counts = np.stack([(r == c).sum(axis=1) for c in cats], axis=1).astype(np.float64)  # (items, q)
    n_i = counts.sum(axis=1)
    rated = n_i > 0
    if not rated.any():
        raise ValueError("no item has a rating")
    pi = (counts[rated] / n_i[rated, None]).mean(axis=0)
    pe = float((pi * (1.0 - pi)).sum() / (q - 1))
    multi = n_i >= 2
    if not multi.any():
        raise ValueError("Gwet's AC1 needs items rated by at least 2 raters")
    pa = float(((counts[multi] * (counts[multi] - 1)).sum(axis=1) / (n_i[multi] * (n_i[multi] - 1))).mean())
    return (pa - pe) / (1.0 - pe)


def match_case(template: str, word: str) -> str:
    """`word` in the case of the text it replaces: all capitals when `template` is (beyond one letter), else the
    first letter's case (the rest of `word` as given)."""
    if template.isupper() and len(template) > 1:
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def swap_caption(caption: str, swaps: dict[str, str], seed: int, n_swaps: int | None = None) -> str:
    """A negative caption: occurrences of `swaps` keys (whole words or phrases, case-insensitive, longest first)
    replaced by their values, keeping the capitalisation of the first letter. With `n_swaps`, only that many
    occurrences, chosen by `seed`, are replaced (a quality grade can then follow the number of errors); without it,
    all are. Deterministic: the same (caption, swaps, seed, n_swaps) always gives the same text."""
    if not swaps:
        return caption
    keys = sorted(swaps, key=lambda k: (-len(k), k))
    pattern = re.compile(r"\b(" + "|".join(re.escape(k) for k in keys) + r")\b", re.IGNORECASE)
    matches = list(pattern.finditer(caption))
    if not matches:
        return caption
    lower = {k.lower(): v for k, v in swaps.items()}
    chosen = range(len(matches))
    if n_swaps is not None:
        if n_swaps < 0:
            raise ValueError(f"n_swaps must be >= 0, got {n_swaps}")
        rng = np.random.default_rng(int(seed))
        chosen = sorted(rng.choice(len(matches), size=min(n_swaps, len(matches)), replace=False).tolist())
    pieces, last = [], 0
    for i in chosen:
        m = matches[i]
        pieces += [caption[last:m.start()], match_case(m.group(0), lower[m.group(0).lower()])]
        last = m.end()
    pieces.append(caption[last:])
    return "".join(pieces)
