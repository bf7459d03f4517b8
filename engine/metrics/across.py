"""Protocols (or judges) held against each other on the same caption cells: `capeval compare --across
protocols|judges` and the report's section (engine/report/across.py; docs/report.md has a worked example).

A *rater* is one protocol under one judge on one dataset; it scores systems (captioner x prompt x frame spec) by
its metrics, computed from the protocol's paired statistic (`paired_spec(mode)`, engine/metrics/paired.py) exactly
as `capeval compare` computes them: sums of per-(video, task) statistics, each metric a function of the sums,
averaged over tasks where the protocol averages over them (`compare_average_over`).

1. Rank agreement. Two raters that scored the same systems (across protocols: same dataset and judge; across
   judges: same dataset and protocol) are compared by Kendall's tau_b (and Spearman's rho) between the systems'
   headline values, each rater's headline being its protocol's first `headline` metric (kernels/correlation.py).
   Both raters' values rest on the same captions: only the (system, video) cells that both raters judged (at
   least one verdict each, not only rows without one) enter, so each system is scored by both on the same videos;
   `n_videos` counts the videos of those cells and `n_videos_a` / `n_videos_b` the videos each rater judged for
   the shared systems. Without a video both judged, tau_b is undefined (null) and the warning says why.
   The interval resamples the videos both raters judged, jointly: every replicate draws the same videos for both
   raters and every system (capeval.kernels.bootstrap.cluster_bootstrap over the stacked per-video statistics),
   recomputes every headline value, then tau_b; percentile interval over the replicates.

2. Length sensitivity, per rater and metric. Length is the caption's word count (whitespace-separated tokens of
   the judged caption text) on a log2 scale, x = log2(max(words, 1)), so slopes read "points per doubling".
   * item level: the per-caption statistic y_sv (the metric computed on system s's verdicts of video v alone; a
     caption is one (system, video)) regressed on x with system fixed effects, y_sv = a_s + beta * x_sv + e:
     `slope_item` = beta (OLS on the within-system deviations) and `partial_r_item` = the correlation of y and x
     given the system (the correlation of those deviations).
   * system level: across systems, the system's value against its mean x: `slope_system` (OLS) and `r_system`
     (Pearson; nothing is partialled out, and with a handful of systems it describes, it does not test).
   * length-controlled score: the metric at a reference length read off the rater's fitted line,
     controlled_s = value_s - beta * (xbar_s - log2(reference_words)), value_s the system's metric and xbar_s its
     captions' mean x. The reference is the median word count of the run's judged captions unless given, the same
     for every rater. This is the idea of AlpacaEval's length-controlled win rates (Dubois, Galambosi, Liang and
     Hashimoto 2024, "Length-Controlled AlpacaEval: A Simple Way to Debias Automatic Evaluators",
     arXiv:2404.04475): fit the judge's outcome with a length term beside the model's own term, then predict the
     outcome with the length term held at a common value. Here the model is linear in log length with one
     intercept per system; with equal weights per caption, controlled_s is that system's intercept read at the
     reference length.
   Every quantity is a function of per-video sums (the statistics and, per system and metric, the moments n, x,
   y, x^2, xy, y^2 of its captions with a defined y), so one cluster bootstrap over videos gives every interval.

What it does not do: beta is identified only by length variation within a system (a system whose captions all
have one length adds nothing), a video that is both harder and described at greater length confounds it (no video
effects: the model stays simple), and a length effect may be real (a longer caption can cover more); the
controlled score removes the linear association, it does not say which part is the judge's bias.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import polars as pl

from capeval.engine.metrics.paired import PairedSpec, task_mean_values
from capeval.engine.registry import lookup
from capeval.kernels.bootstrap import cluster_bootstrap, percentile_ci
from capeval.kernels.correlation import kendall_tau_b, spearman_rho

#: what varies between raters, and what is held fixed, for each `--across`
ACROSS = {"protocols": ("protocol", ("dataset", "judge")), "judges": ("judge", ("dataset", "protocol"))}
SYSTEM = ("captioner", "prompt_id", "frame_spec")
MIN_VIDEOS = 20
#: below this many systems tau_b takes only a few values: said in the row's warning
FEW_SYSTEMS = 5

AGREEMENT_SCHEMA = {"dataset": pl.String, "held": pl.String, "a": pl.String, "b": pl.String, "metric_a": pl.String,
                    "metric_b": pl.String, "n_systems": pl.Int64, "n_videos": pl.Int64, "n_videos_a": pl.Int64,
                    "n_videos_b": pl.Int64, "tau_b": pl.Float64,
                    "tau_b_low": pl.Float64, "tau_b_high": pl.Float64, "spearman": pl.Float64,
                    "spearman_low": pl.Float64, "spearman_high": pl.Float64, "warning": pl.String}
_FITS = ("slope_item", "partial_r_item", "slope_system", "r_system")
LENGTH_SCHEMA = {"dataset": pl.String, "protocol": pl.String, "judge": pl.String, "metric": pl.String,
                 "n_systems": pl.Int64, "n_captions": pl.Int64,
                 **{f"{f}{s}": pl.Float64 for f in _FITS for s in ("", "_low", "_high")}, "warning": pl.String}
CONTROLLED_SCHEMA = {"dataset": pl.String, "protocol": pl.String, "judge": pl.String, "captioner": pl.String,
                     "prompt_id": pl.String, "frame_spec": pl.String, "metric": pl.String, "value": pl.Float64,
                     "words": pl.Float64, "controlled": pl.Float64, "controlled_low": pl.Float64,
                     "controlled_high": pl.Float64, "reference_words": pl.Float64}


@dataclass(frozen=True)
class Rater:
    """One protocol under one judge on one dataset, and how its verdicts become metrics."""

    dataset: str
    protocol: str  # the label in the run (a sweep's `label`, else the protocol's name)
    judge: str
    spec: PairedSpec
    average_over: str | None
    metrics: tuple[str, ...]  # headline order; metrics[0] ranks the systems

    def rows(self, verdicts: pl.DataFrame) -> pl.DataFrame:
        return verdicts.filter((pl.col("dataset") == self.dataset) & (pl.col("protocol") == self.protocol)
                               & (pl.col("judge") == self.judge))


@dataclass
class AcrossResult:
    across: str
    agreement: pl.DataFrame  # AGREEMENT_SCHEMA: one row per pair of raters over shared systems
    length: pl.DataFrame  # LENGTH_SCHEMA: one row per (rater, metric)
    controlled: pl.DataFrame  # CONTROLLED_SCHEMA: one row per (rater, system, metric)
    reference_words: float | None
    notes: list[str] = field(default_factory=list)


def rater_pairs(verdicts: pl.DataFrame, across: str) -> list[tuple[dict, str, str]]:
    """(held labels, rater a, rater b) for every two raters of the same held group sharing at least one system."""
    varied, held = ACROSS[across]
    cells = verdicts.select(*held, varied, *SYSTEM).unique()
    out = []
    for key, g in sorted(cells.group_by(list(held)), key=lambda kg: tuple(map(str, kg[0]))):
        systems = {r: set(s.select(*SYSTEM).rows()) for (r,), s in g.group_by(varied)}
        for a, b in combinations(sorted(systems), 2):
            if systems[a] & systems[b]:
                out.append((dict(zip(held, key)), a, b))
    return out


def caption_words(captions: pl.DataFrame | None) -> pl.DataFrame | None:
    """SYSTEM + video_id + words (whitespace-separated tokens of the caption; null where the caption failed)."""
    if captions is None or not {"text", "video_id", *SYSTEM} <= set(captions.columns):
        return None
    return captions.select(*SYSTEM, "video_id", pl.col("text").str.extract_all(r"\S+").list.len().alias("words")
                           ).unique(subset=[*SYSTEM, "video_id"], keep="first", maintain_order=True)


def across_run(verdicts: pl.DataFrame, captions: pl.DataFrame | None = None, *, across: str = "protocols",
               modes: dict[str, str] | None = None, reference_words: float | None = None, n_resamples: int = 2000,
               seed: int = 0, confidence: float = 0.95) -> AcrossResult:
    """Rank agreement between the raters that vary `across` and length sensitivity of every rater.

    verdicts: labelled verdict rows (capeval.engine.report.rundir.load_run(...).verdicts); captions: the run's captions
    (text per system and video), None: no length analysis; modes: protocol label or name -> metric mode (default
    the protocol's `compare_default_mode`); reference_words: the controlled scores' length (default: the median
    word count of the judged captions)."""
    if across not in ACROSS:
        raise ValueError(f"across must be one of {', '.join(ACROSS)}, got {across!r}")
    if reference_words is not None and not reference_words > 0:
        raise ValueError(f"the reference length must be a positive number of words, got {reference_words}")
    modes, notes, raters = modes or {}, [], {}

    def rater(dataset, protocol, judge) -> Rater | None:
        key = (dataset, protocol, judge)
        if key not in raters:
            raters[key] = _rater(verdicts, key, modes, notes)
        return raters[key]

    varied, held = ACROSS[across]
    rows = []
    for fixed, a, b in rater_pairs(verdicts, across):
        ra, rb = (rater(**{**fixed, varied: x}) for x in (a, b))
        base = {"dataset": fixed["dataset"], "held": f"{held[1]}={fixed[held[1]]}", "a": a, "b": b}
        if ra is not None and rb is not None:
            rows.append({**base, **_agreement(verdicts, ra, rb, n_resamples, seed, confidence)})
    words = _judged_words(verdicts, caption_words(captions))
    if words is None:
        notes.append("no caption texts in this run (captions/ holds none for the judged systems): no length "
                     "sensitivity")
    elif reference_words is None:
        reference_words = float(words["words"].median())
    length, controlled = [], []
    if words is not None:
        x_ref = np.log2(max(reference_words, 1.0))
        for key in verdicts.select("dataset", "protocol", "judge").unique().sort(pl.all()).rows():
            r = rater(*key)
            if r is not None:
                fit, ctl = _length(r, r.rows(verdicts), words, x_ref, n_resamples, seed, confidence)
                length += fit
                controlled += [{**c, "reference_words": reference_words} for c in ctl]
    return AcrossResult(across, pl.DataFrame(rows, schema=AGREEMENT_SCHEMA),
                        pl.DataFrame(length, schema=LENGTH_SCHEMA), pl.DataFrame(controlled, schema=CONTROLLED_SCHEMA),
                        reference_words if words is not None else None, notes)


def _rater(verdicts, key, modes, notes) -> Rater | None:
    dataset, label, judge = key
    names = verdicts.filter(pl.col("protocol") == label)["protocol_name"]
    name = names[0] if names.len() else label
    try:
        protocol = lookup("protocol", name)
    except KeyError:
        notes.append(f"{label}: {name!r} is not a registered protocol; left out")
        return None
    spec = protocol.paired_spec(modes.get(label, modes.get(name)) or protocol.compare_default_mode)
    if spec is None:
        notes.append(f"{label}: protocol {name!r} declares no paired statistic (paired_spec is None); left out")
        return None
    metrics = tuple(m for m in protocol.headline if m in spec.metrics) or tuple(spec.metrics)
    return Rater(dataset, label, judge, spec, protocol.compare_average_over, metrics)


def _judged_words(verdicts, words) -> pl.DataFrame | None:
    """Word counts of the captions the verdicts judged (one per system and video), None without any."""
    if words is None:
        return None
    judged = words.join(verdicts.select(*SYSTEM, "video_id").unique(), on=[*SYSTEM, "video_id"], how="semi")
    judged = judged.filter(pl.col("words").is_not_null())
    return judged if judged.height else None


def _index(frame: pl.DataFrame, name: str) -> pl.DataFrame:
    """`frame` with its row numbers (Int64) in column `name`."""
    return frame.with_row_index(name).with_columns(pl.col(name).cast(pl.Int64))


def per_video_stats(rows: pl.DataFrame, rater: Rater, systems: list[tuple], videos: list[str]) -> np.ndarray:
    """(V, N, T, S) sums of the rater's statistics per (video, system, task); T over the tasks of `rows`."""
    task = pl.col(rater.average_over).cast(pl.String) if rater.average_over else pl.lit("all")
    stats = rater.spec.stats(rows.with_columns(task.alias("_task")), {})
    cols = [f"_s{k}" for k in range(rater.spec.n_stats)]
    tasks = sorted(set(stats["_task"].to_list()))
    sys_ix = _index(pl.DataFrame(systems, schema=list(SYSTEM), orient="row"), "_n")
    agg = (stats.group_by(*SYSTEM, "video_id", "_task").agg(pl.col(cols).sum())
           .join(sys_ix, on=list(SYSTEM)).join(_index(pl.DataFrame({"video_id": videos}), "_v"),
                                               on="video_id")
           .join(_index(pl.DataFrame({"_task": tasks}), "_t"), on="_task"))
    out = np.zeros((len(videos), len(systems), len(tasks), rater.spec.n_stats))
    np.add.at(out, (agg["_v"].to_numpy(), agg["_n"].to_numpy(), agg["_t"].to_numpy()), agg.select(cols).to_numpy())
    return out


def metric_values(rater: Rater, sums: np.ndarray, metrics=None) -> np.ndarray:
    """(..., T, S) sums -> (..., M) values of `metrics` (default all the rater's), the mean over tasks where
    defined, on the protocol's scale; nan where undefined (a 0/0)."""
    return task_mean_values(rater.spec, sums, metrics or rater.metrics)


def _systems(rows: pl.DataFrame) -> list[tuple]:
    return sorted(rows.select(*SYSTEM).unique().rows(), key=lambda s: tuple(map(str, s)))


def _interval(samples: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    low, high = percentile_ci(samples, confidence)
    return _f(low), _f(high)


def _f(x) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


def _agreement(verdicts, ra: Rater, rb: Rater, n_resamples, seed, confidence) -> dict:
    """tau_b and rho between the two raters' headline values over their shared systems, with intervals from one
    bootstrap over their shared videos (the same draws for both)."""
    rows_a, rows_b = ra.rows(verdicts), rb.rows(verdicts)
    shared = pl.DataFrame(sorted(set(_systems(rows_a)) & set(_systems(rows_b)), key=lambda s: tuple(map(str, s))),
                          schema=list(SYSTEM), orient="row")
    judged_a, judged_b = (_judged_cells(r, shared) for r in (rows_a, rows_b))
    both = judged_a.join(judged_b, on=[*SYSTEM, "video_id"], how="semi")
    rows_a, rows_b = (r.join(both, on=[*SYSTEM, "video_id"], how="semi") for r in (rows_a, rows_b))
    systems = _systems(both)
    videos = sorted(set(both["video_id"].to_list()))
    out = {"metric_a": ra.metrics[0], "metric_b": rb.metrics[0], "n_systems": len(systems), "n_videos": len(videos),
           "n_videos_a": judged_a["video_id"].n_unique(), "n_videos_b": judged_b["video_id"].n_unique()}
    if not videos:
        name_a, name_b = (ra.judge, rb.judge) if ra.judge != rb.judge else (ra.protocol, rb.protocol)
        return {**out, "warning": f"no video judged by both raters ({name_a} judged {out['n_videos_a']}, {name_b} "
                                  f"{out['n_videos_b']}, none in common): rank agreement undefined"}
    if len(systems) < 2:
        return {**out, "warning": "fewer than 2 systems judged by both raters on a shared video: rank agreement "
                                  "undefined"}
    ca, cb = (per_video_stats(r, x, systems, videos) for r, x in ((rows_a, ra), (rows_b, rb)))
    split = ca[0].size

    def statistic(sums: np.ndarray) -> np.ndarray:  # (b, columns) -> (b, 2, N): each rater's headline values
        a = metric_values(ra, sums[:, :split].reshape((-1,) + ca.shape[1:]), ra.metrics[:1])[..., 0]
        b = metric_values(rb, sums[:, split:].reshape((-1,) + cb.shape[1:]), rb.metrics[:1])[..., 0]
        return np.stack([a, b], axis=1)

    counts = np.concatenate([ca.reshape(len(videos), -1), cb.reshape(len(videos), -1)], axis=1)
    point = statistic(counts.sum(axis=0)[None])[0]
    reps = cluster_bootstrap(counts, statistic, n_resamples, seed)
    taus = np.array([kendall_tau_b(r[0], r[1]) for r in reps])
    rhos = np.array([spearman_rho(r[0], r[1]) for r in reps])
    warn = []
    if len(videos) < max(out["n_videos_a"], out["n_videos_b"]):
        warn.append(f"over the {len(videos)} videos both judged ({out['n_videos_a']} and {out['n_videos_b']} "
                    f"judged by each)")
    if len(videos) < MIN_VIDEOS:
        warn.append(f"{len(videos)} shared videos (< {MIN_VIDEOS})")
    if len(systems) < FEW_SYSTEMS:
        warn.append(f"{len(systems)} systems: tau_b takes few values")
    for rater, values in ((ra, point[0]), (rb, point[1])):
        if np.isnan(values).any():
            warn.append(f"{rater.protocol}/{rater.judge}: a system's {rater.metrics[0]} is undefined")
        elif np.ptp(values) == 0:
            warn.append(f"{rater.protocol}/{rater.judge} gives every system the same {rater.metrics[0]}: "
                        f"no ranking to agree with")
    undefined = int(np.isnan(taus).sum())
    if 0 < undefined:
        warn.append(f"tau_b undefined in {undefined} of {n_resamples} replicates (ties or undefined values)")
    (tl, th), (rl, rh) = _interval(taus, confidence), _interval(rhos, confidence)
    return {**out, "tau_b": _f(kendall_tau_b(point[0], point[1])), "tau_b_low": tl, "tau_b_high": th,
            "spearman": _f(spearman_rho(point[0], point[1])), "spearman_low": rl, "spearman_high": rh,
            "warning": "; ".join(warn) or None}


def _judged_cells(rows: pl.DataFrame, systems: pl.DataFrame) -> pl.DataFrame:
    """SYSTEM + video_id of the (system, video) cells of `systems` where the rater gave at least one verdict."""
    return (rows.filter(pl.col("verdict") >= 0).select(*SYSTEM, "video_id").unique()
            .join(systems, on=list(SYSTEM), how="semi"))


def caption_log_length(words: pl.DataFrame, systems: list[tuple], videos: list[str]) -> np.ndarray:
    """(V, N) log2(max(words, 1)) of each system's caption of each video; nan without one."""
    w = (words.join(_index(pl.DataFrame(systems, schema=list(SYSTEM), orient="row"), "_n"), on=list(SYSTEM))
         .join(_index(pl.DataFrame({"video_id": videos}), "_v"), on="video_id"))
    out = np.full((len(videos), len(systems)), np.nan)
    out[w["_v"].to_numpy(), w["_n"].to_numpy()] = np.log2(np.maximum(w["words"].to_numpy().astype(float), 1.0))
    return out


def length_fits(values: np.ndarray, moments: np.ndarray, x_ref: float) -> list[np.ndarray]:
    """[slope_item, partial_r_item, slope_system, r_system] (b, M) and controlled (b, N, M) from the systems'
    values (b, N, M) and their captions' summed moments (b, N, M, 6: n, x, y, xx, xy, yy)."""
    n, sx, sy, sxx, sxy, syy = np.moveaxis(moments, -1, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        has = n > 0
        xbar = np.where(has, sx / np.where(has, n, 1.0), np.nan)
        within = [np.where(has, a - b * c / np.where(has, n, 1.0), 0.0).sum(axis=1)
                  for a, b, c in ((sxx, sx, sx), (sxy, sx, sy), (syy, sy, sy))]
        wxx, wxy, wyy = within
        identified = wxx > 1e-9 * np.maximum(1.0, np.where(has, sxx, 0.0).sum(axis=1))
        beta = np.where(identified, wxy / np.where(identified, wxx, 1.0), np.nan)
        r_item = np.where(identified & (wyy > 0), wxy / np.sqrt(wxx * wyy), np.nan)
        ok = has & np.isfinite(values)
        k = ok.sum(axis=1)
        mx = np.where(ok, xbar, 0.0).sum(axis=1) / k
        my = np.where(ok, values, 0.0).sum(axis=1) / k
        dx, dy = np.where(ok, xbar - mx[:, None], 0.0), np.where(ok, values - my[:, None], 0.0)
        vxx, vxy, vyy = (dx * dx).sum(axis=1), (dx * dy).sum(axis=1), (dy * dy).sum(axis=1)
        slope_sys = np.where((k >= 2) & (vxx > 1e-12), vxy / vxx, np.nan)
        r_sys = np.where((k >= 3) & (vxx > 1e-12) & (vyy > 0), vxy / np.sqrt(vxx * vyy), np.nan)
        controlled = values - beta[:, None, :] * (xbar - x_ref)
    return [beta, np.clip(r_item, -1, 1), slope_sys, np.clip(r_sys, -1, 1), controlled]


def _length(rater: Rater, rows, words, x_ref, n_resamples, seed, confidence) -> tuple[list[dict], list[dict]]:
    """The rater's LENGTH_SCHEMA rows (one per metric) and CONTROLLED_SCHEMA rows (per system and metric)."""
    systems, videos = _systems(rows), sorted(set(rows["video_id"].to_list()))
    stats = per_video_stats(rows, rater, systems, videos)  # (V, N, T, S)
    y = metric_values(rater, stats)  # (V, N, M): the per-caption statistic
    x = caption_log_length(words, systems, videos)
    ok = ~np.isnan(y) & ~np.isnan(x)[..., None]
    xs, ys = np.where(ok, x[..., None], 0.0), np.where(ok, y, 0.0)
    moments = np.stack([ok.astype(np.float64), xs, ys, xs * xs, xs * ys, ys * ys], axis=-1)
    n_sys, n_met, split = len(systems), len(rater.metrics), stats[0].size
    counts = np.concatenate([stats.reshape(len(videos), -1), moments.reshape(len(videos), -1)], axis=1)

    def statistic(sums: np.ndarray) -> np.ndarray:  # (b, columns) -> (b, 4M + N M)
        values = metric_values(rater, sums[:, :split].reshape((-1,) + stats.shape[1:]))
        fits = length_fits(values, sums[:, split:].reshape(-1, n_sys, n_met, 6), x_ref)
        return np.concatenate([f.reshape(len(sums), -1) for f in fits], axis=1)

    total = counts.sum(axis=0)[None]
    point = statistic(total)[0]
    low, high = percentile_ci(cluster_bootstrap(counts, statistic, n_resamples, seed), confidence)
    values = metric_values(rater, total[:, :split].reshape((-1,) + stats.shape[1:]))[0]  # (N, M)
    mom = total[0, split:].reshape(n_sys, n_met, 6)
    label = {"dataset": rater.dataset, "protocol": rater.protocol, "judge": rater.judge}
    fit_rows, ctl_rows = [], []
    for m, metric in enumerate(rater.metrics):
        row = {**label, "metric": metric, "n_systems": int((mom[:, m, 0] > 0).sum()),
               "n_captions": int(mom[:, m, 0].sum())}
        for f, name in enumerate(_FITS):
            j = f * n_met + m
            row.update({name: _f(point[j]), f"{name}_low": _f(low[j]), f"{name}_high": _f(high[j])})
        warn = []
        if row["n_captions"] == 0:
            warn.append("no caption text (or no defined value) for any of its systems' videos")
        elif row["slope_item"] is None:
            warn.append("no length variation within a system: slope and controlled scores undefined")
        if 0 < row["n_captions"] < MIN_VIDEOS:
            warn.append(f"{row['n_captions']} captions (< {MIN_VIDEOS})")
        if row["n_systems"] < 3:
            warn.append("system-level r needs >= 3 systems")
        fit_rows.append({**row, "warning": "; ".join(warn) or None})
        for s, system in enumerate(systems):
            j = 4 * n_met + s * n_met + m
            n = mom[s, m, 0]
            ctl_rows.append({**label, **dict(zip(SYSTEM, system)), "metric": metric, "value": _f(values[s, m]),
                             "words": float(2.0 ** (mom[s, m, 1] / n)) if n > 0 else None,
                             "controlled": _f(point[j]), "controlled_low": _f(low[j]),
                             "controlled_high": _f(high[j])})
    return fit_rows, ctl_rows
