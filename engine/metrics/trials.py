"""Judge trials inside a metrics group: detect them in a verdict table and give their groups two-stage intervals.

A cell judged with several judge seeds (verdict columns `seed` / `trial`), or by several judges whose verdicts a
protocol pools (`judge`), has more than one verdict per (video, item) in a group. Its interval must then account
for the judge answering differently on each trial: `count_table` keeps, besides the per-video counts, counts per
(video, trial) unit (`trial_counts`), and `metrics_frame` hands such a table to `trial_metrics_frame`, which runs
the two-stage bootstrap of kernels/two_stage.py (videos, then each drawn video's trials) and adds two columns:

  ci_kind            "video+trial" where the group has a video judged in two or more trials, else "video";
  judge_noise_share  the share of the metric's sampling variance that is judge noise, in [0, 1]: the variance
                     of the within-video trial resampling (its plug-in bias corrected) over the variance of the
                     video bootstrap (docs/statistics.md has the definition and a worked example).

Values, n and n_no_verdict are unchanged; a table with one trial per (video, item, group) never comes here, so
its numbers are exactly those of the video bootstrap. This module sits below engine/metrics/core.py (which
imports it), so `trial_metrics_frame` receives core's `bootstrap_frame` as an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from capeval.kernels.aggregate import count_codes_by_cluster
from capeval.kernels.two_stage import judge_noise, two_stage_bootstrap

#: verdict columns whose values tell the trials of one (video, item) apart, unless they are group columns
TRIAL_COLUMNS = ("judge", "seed", "trial")
#: verdict columns naming an item within a video (those present and not group columns)
ITEM_COLUMNS = ("task", "item_id", "sub_index")
CI_VIDEO, CI_VIDEO_TRIAL = "video", "video+trial"


@dataclass(frozen=True)
class TrialCounts:
    """Code counts per (video, trial) unit of a count table whose groups hold several trials per (video, item)."""

    counts: np.ndarray  # int64 (n_units, n_groups, n_codes + 1); summed over a video's units: CountTable.counts
    unit_cluster: np.ndarray  # int64 (n_units,): the unit's cluster, an index into CountTable.clusters
    columns: tuple[str, ...]  # the verdict columns that tell trials apart


def _ids(keys: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame]:
    """(int64 id per row, unique keys in first-seen order); nulls are a key of their own."""
    uniques = keys.unique(maintain_order=True).with_row_index("__id")
    ids = keys.join(uniques, on=keys.columns, how="left", nulls_equal=True, maintain_order="left")["__id"]
    return ids.cast(pl.Int64).to_numpy(), uniques.drop("__id")


def trial_counts(frame: pl.DataFrame, group_columns, cluster_columns, cluster_ids: np.ndarray,
                 group_ids: np.ndarray, codes: np.ndarray, n_groups: int, n_codes: int) -> TrialCounts | None:
    """Per-(video, trial) counts when some (video, item, group) has verdicts from more than one trial, else None.

    A trial is a distinct value of the TRIAL_COLUMNS present in `frame` that are neither group nor cluster
    columns; several steps of one item under one trial are one trial."""
    skip = set(group_columns) | set(cluster_columns)
    columns = [c for c in TRIAL_COLUMNS if c in frame.columns and c not in skip]
    if not columns or frame.height == 0 or frame.select(columns).n_unique() <= 1:
        return None
    trial_ids, _ = _ids(frame.select(columns))
    items = [c for c in ITEM_COLUMNS if c in frame.columns and c not in skip]
    probe = pl.DataFrame({"__c": cluster_ids, "__g": group_ids, "__t": trial_ids}).hstack(frame.select(items))
    most = probe.group_by(["__c", "__g", *items]).agg(pl.col("__t").n_unique())["__t"].max()
    if most is None or most <= 1:
        return None
    unit_ids, units = _ids(pl.DataFrame({"__c": cluster_ids.astype(np.int64), "__t": trial_ids}))
    counts = count_codes_by_cluster(unit_ids, group_ids, codes, units.height, n_groups, n_codes)
    return TrialCounts(counts, units["__c"].to_numpy().astype(np.int64), tuple(columns))


class _TwoStageReplicates:
    """bootstrap_frame's `replicates`: two-stage replicates of its metrics; keeps the judge-noise shares."""

    def __init__(self, cluster_counts, unit_counts, unit_cluster, n_resamples: int, seed: int, strata, present=None):
        self.args = (cluster_counts, unit_counts, unit_cluster)
        self.n_resamples, self.seed, self.strata, self.present = n_resamples, seed, strata, present
        self.share: np.ndarray | None = None  # (n_metrics, rows) once called

    def __call__(self, evaluate: Callable[[np.ndarray], np.ndarray], value: np.ndarray) -> np.ndarray:
        samples = two_stage_bootstrap(*self.args, evaluate, self.n_resamples, self.seed, self.strata, self.present)
        noise = judge_noise(value, samples)
        self.share = noise.judge_noise_share
        return noise.replicates


def _share(reps: _TwoStageReplicates, n_rows: int, n_metrics: int) -> np.ndarray:
    """The shares reps drew, or nan (n_metrics, n_rows) where it drew none (nothing to resample)."""
    return reps.share if reps.share is not None else np.full((n_metrics, n_rows), np.nan)


def _multi_trial(unit_counts: np.ndarray, unit_cluster: np.ndarray, n_clusters: int) -> np.ndarray:
    """bool (n_groups,): the group has a video with rows in two or more trial units."""
    present = unit_counts.sum(-1) > 0  # (U, G)
    per_video = np.zeros((n_clusters, present.shape[1]), dtype=np.int64)
    np.add.at(per_video, unit_cluster, present)
    return (per_video > 1).any(0)


def _row_flags(frame: pl.DataFrame, keys: pl.DataFrame, multi: np.ndarray, n_metrics: int,
               average_over: str | None) -> np.ndarray:
    """bool per row of bootstrap_frame's output (groups, then averages; metrics within each): "video+trial"?
    An average row is when any of its member groups is."""
    flags = np.repeat(multi, n_metrics)
    if frame.height == flags.size:
        return flags
    others = [c for c in keys.columns if c != average_over]
    tail = frame[flags.size:]
    if not others:
        return np.concatenate([flags, np.full(tail.height, bool(multi.any()))])
    member = keys.with_columns(pl.Series("__m", multi)).group_by(others).agg(pl.col("__m").any())
    tail_flags = tail.select(others).join(member, on=others, how="left", nulls_equal=True, maintain_order="left")
    return np.concatenate([flags, tail_flags["__m"].fill_null(False).to_numpy()])


def _with_trial_columns(frame: pl.DataFrame, flags: np.ndarray, shares: list, n_resamples: int) -> pl.DataFrame:
    """frame + ci_kind and judge_noise_share (null: n_resamples = 0 drew no interval to describe). `shares`: each
    bootstrap_frame call's (n_metrics, rows) shares, None where it drew no replicates."""
    if n_resamples <= 0:
        return frame.with_columns(pl.lit(None, dtype=pl.String).alias("ci_kind"),
                                  pl.lit(None, dtype=pl.Float64).alias("judge_noise_share"))
    share = np.concatenate([np.asarray(s).T.ravel() for s in shares])  # -> bootstrap_frame's row order
    return frame.with_columns(pl.Series("ci_kind", np.where(flags, CI_VIDEO_TRIAL, CI_VIDEO), dtype=pl.String),
                              pl.Series("judge_noise_share", share, dtype=pl.Float64).fill_nan(None))


def trial_metrics_frame(table, metrics: Mapping[str, Callable], bootstrap_frame: Callable, *, n_resamples: int,
                        seed: int, confidence: float, scale, average_label: str | None, average_over: str | None,
                        resample: str, nan_as_null: bool) -> pl.DataFrame:
    """core.metrics_frame for a CountTable with `trials`: the same rows and values, two-stage intervals, and the
    ci_kind / judge_noise_share columns. resample="joint": one draw of videos for all groups, and in each drawn
    video each group resamples the trials it was judged in (groups judged in the same trials share those draws);
    "per_group": each group resamples the videos and the trials it has rows in, with the same seed."""
    trials: TrialCounts = table.trials
    rows = table.rows
    keys = table.groups.select(table.group_columns) if table.group_columns else pl.DataFrame()
    options = dict(n_resamples=n_resamples, seed=seed, confidence=confidence, scale=scale, nan_as_null=nan_as_null)
    multi = _multi_trial(trials.counts, trials.unit_cluster, table.n_clusters)
    if resample == "joint":
        tallies = {"n": rows[..., 0].sum(0), "n_no_verdict": rows[..., 1].sum(0)}
        reps = _TwoStageReplicates(table.counts, trials.counts, trials.unit_cluster, n_resamples, seed, table.strata,
                                   present=trials.counts.sum(-1) > 0)  # each group: the trials it was judged in
        frame = bootstrap_frame(table.counts, keys, metrics, tallies, strata=table.strata, average_over=average_over,
                                average_label=average_label, verdict_rows=tallies["n"], replicates=reps, **options)
        return _with_trial_columns(frame, _row_flags(frame, keys, multi, len(metrics), average_over),
                                   [_share(reps, frame.height // max(len(metrics), 1), len(metrics))], n_resamples)
    if resample != "per_group":
        raise ValueError(f"resample must be 'joint' or 'per_group', got {resample!r}")
    if average_over is not None:
        raise ValueError("average_over needs resample='joint' (averages share one bootstrap over all groups)")
    present = rows.sum(-1) > 0
    frames, shares = [], []
    for g in range(table.n_groups):
        idx = np.flatnonzero(present[:, g])
        position = np.full(table.n_clusters, -1, dtype=np.int64)
        position[idx] = np.arange(idx.size)
        mine = np.flatnonzero(trials.counts[:, g].sum(-1) > 0)
        tallies = {"n": rows[idx, g, 0].sum(keepdims=True), "n_no_verdict": rows[idx, g, 1].sum(keepdims=True)}
        strata = None if table.strata is None else table.strata[idx]
        reps = _TwoStageReplicates(table.counts[idx, g][:, None], trials.counts[mine, g][:, None],
                                   position[trials.unit_cluster[mine]], n_resamples, seed, strata)
        frames.append(bootstrap_frame(table.counts[idx, g][:, None], keys[g:g + 1], metrics, tallies, strata=strata,
                                      verdict_rows=tallies["n"], replicates=reps, **options))
        shares.append(_share(reps, 1, len(metrics)))
    return _with_trial_columns(pl.concat(frames, how="vertical"), np.repeat(multi, len(metrics)), shares, n_resamples)
