"""Verdict tables with several judge trials per (video, item): count_table keeps them, metrics_frame gives two-stage
intervals with ci_kind and judge_noise_share. Simulated tables with known between-video and judge-noise variance
check that the share is recovered and that the intervals cover at 0.95 +- 0.02; one trial keeps today's numbers."""

import dataclasses

import numpy as np
import polars as pl
import pytest

from capeval.engine.metrics.core import count_table, metrics_frame, safe_ratio
from capeval.engine.schemas import NO_VERDICT

NO, YES = 0, 1


def yes_rate(c):
    return safe_ratio(c[..., YES], c[..., NO] + c[..., YES])  # no-verdict rows leave the denominator: a ratio


def simulate(rng, n_sims, n_videos, n_items, n_trials, a, b, c, missing=0.0) -> pl.DataFrame:
    """n_sims independent data sets (captioner = the data set). Video v has a YES probability p_v ~ Beta(a, b);
    its item i has q_vi ~ Beta(c p_v, c (1 - p_v)) (items differ, and that difference is part of the video); each
    judge trial answers YES with probability q_vi, independently: the trial-to-trial variation is judge noise."""
    p = rng.beta(a, b, (n_sims, n_videos))
    q = rng.beta(c * p[..., None], c * (1 - p[..., None]), (n_sims, n_videos, n_items))
    code = np.where(rng.random((n_sims, n_videos, n_items, n_trials)) < q[..., None], YES, NO).astype(np.int8)
    if missing:
        code = np.where(rng.random(code.shape) < missing, NO_VERDICT, code).astype(np.int8)
    s, v, i, t = np.indices(code.shape).reshape(4, -1)
    return pl.DataFrame({"captioner": s.astype(str), "video_id": v.astype(str), "item_id": i.astype(str),
                         "trial": pl.Series(t, dtype=pl.Int16), "verdict": code.ravel()})


def true_share(n_items, n_trials, a, b, c) -> float:
    """J / (B + J) for the YES rate of `simulate` without missing verdicts (a mean over videos of equal size):
    B = Var(mean of q over a video's items), J = E[q (1 - q)] / (items * trials)."""
    e_p1p = a * b / ((a + b) * (a + b + 1))
    var_p = a * b / ((a + b) ** 2 * (a + b + 1))
    between = var_p + e_p1p / (c + 1) / n_items  # Var(q | p) = p (1 - p) / (c + 1)
    noise = e_p1p * c / (c + 1) / (n_items * n_trials)  # E[q (1 - q) | p] = p (1 - p) c / (c + 1)
    return noise / (between + noise)


def _video_only(table):
    return dataclasses.replace(table, trials=None)  # the same counts, bootstrapped over videos only


@pytest.fixture(scope="module")
def small():
    return simulate(np.random.default_rng(0), 4, 40, 3, 3, 2, 3, 4, missing=0.1)


def test_one_trial_keeps_the_video_bootstrap_exactly(small):
    one = small.filter(pl.col("trial") == 1)
    table = count_table(one, ["captioner"], 2)
    assert table.trials is None
    frame = metrics_frame(table, {"yes": yes_rate}, n_resamples=400, seed=3)
    assert "ci_kind" not in frame.columns and "judge_noise_share" not in frame.columns
    plain = count_table(one.drop("trial"), ["captioner"], 2)
    assert frame.equals(metrics_frame(plain, {"yes": yes_rate}, n_resamples=400, seed=3))
    # trials that are a group column are not pooled: one trial per group again
    assert count_table(small, ["captioner", "trial"], 2).trials is None


def test_trials_give_two_stage_intervals_and_the_same_values(small):
    table = count_table(small, ["captioner"], 2)
    assert table.trials is not None and table.trials.columns == ("trial",)
    np.testing.assert_array_equal(np.bincount(table.trials.unit_cluster), np.full(table.n_clusters, 3))
    units = np.zeros_like(table.counts)
    np.add.at(units, table.trials.unit_cluster, table.trials.counts)
    np.testing.assert_array_equal(units, table.counts)
    for resample in ("joint", "per_group"):
        frame = metrics_frame(table, {"yes": yes_rate}, n_resamples=500, seed=1, resample=resample)
        video = metrics_frame(_video_only(table), {"yes": yes_rate}, n_resamples=500, seed=1, resample=resample)
        assert frame.drop("ci_low", "ci_high", "ci_kind", "judge_noise_share").equals(video.drop("ci_low", "ci_high"))
        assert (frame["ci_kind"] == "video+trial").all()
        assert ((frame["judge_noise_share"] > 0) & (frame["judge_noise_share"] < 1)).all()
        assert (frame["ci_low"] < frame["value"]).all() and (frame["value"] < frame["ci_high"]).all()
        assert not frame["ci_low"].equals(video["ci_low"])
    # balanced groups over the same videos: per-group resampling draws what the joint one draws (up to the
    # summation order of variances and percentiles over arrays of another shape)
    joint = metrics_frame(table, {"yes": yes_rate}, n_resamples=500, seed=1, resample="joint")
    alone = metrics_frame(table, {"yes": yes_rate}, n_resamples=500, seed=1, resample="per_group")
    for column in ("ci_low", "ci_high", "judge_noise_share"):
        np.testing.assert_allclose(joint[column].to_numpy(), alone[column].to_numpy(), rtol=1e-12)
    none = metrics_frame(table, {"yes": yes_rate}, n_resamples=0)
    assert none["ci_kind"].is_null().all() and none["judge_noise_share"].is_null().all()


def test_several_judges_pooled_are_trials_and_single_trial_groups_stay_video(small):
    judged = small.filter(pl.col("trial") < 2).with_columns(
        pl.when(pl.col("trial") == 0).then(pl.lit("judge-a")).otherwise(pl.lit("judge-b")).alias("judge"))
    judged = judged.drop("trial").with_columns(pl.lit("all").alias("task"))
    # captioner "3" was judged by judge-a only: its group has one trial per (video, item)
    judged = judged.filter((pl.col("captioner") != "3") | (pl.col("judge") == "judge-a"))
    table = count_table(judged, ["captioner", "task"], 2)
    assert table.trials is not None and table.trials.columns == ("judge",)
    frame = metrics_frame(table, {"yes": yes_rate}, n_resamples=500, seed=4, average_over="captioner")
    video = metrics_frame(_video_only(table), {"yes": yes_rate}, n_resamples=500, seed=4, average_over="captioner")
    kinds = dict(zip(frame["captioner"], frame["ci_kind"]))
    assert kinds == {"0": "video+trial", "1": "video+trial", "2": "video+trial", "3": "video", "avg": "video+trial"}
    single = frame.filter(pl.col("captioner") == "3")
    assert single["judge_noise_share"][0] == 0.0
    assert single.select("ci_low", "ci_high").equals(
        video.filter(pl.col("captioner") == "3").select("ci_low", "ci_high"))


@pytest.mark.parametrize("a, b, c, n_items, n_trials", [(2, 3, 4, 2, 3), (10, 10, 9, 2, 2)])
def test_judge_noise_share_is_recovered(a, b, c, n_items, n_trials):
    """Over 600 simulated data sets of 100 videos, the mean estimated share is within 0.04 of J / (B + J) (it reads
    1-4% high: a ratio of two variance estimates, whose denominator is noisy and (V - 1) / V of B + J), and half
    of the single estimates are within 0.1 (share ~0.3) or 0.2 (share ~0.7) of it."""
    truth = true_share(n_items, n_trials, a, b, c)
    data = simulate(np.random.default_rng(5), 600, 100, n_items, n_trials, a, b, c)
    frame = metrics_frame(count_table(data, ["captioner"], 2), {"yes": yes_rate}, n_resamples=500, seed=2)
    share = frame["judge_noise_share"].to_numpy()
    assert share.mean() == pytest.approx(truth, abs=0.04)
    assert np.median(np.abs(share - truth)) < (0.1 if truth < 0.5 else 0.2)


@pytest.mark.parametrize("a, b, c, n_items, n_trials, missing", [(2, 3, 4, 2, 3, 0.1), (10, 10, 9, 2, 2, 0.0)])
def test_two_stage_interval_covers_at_95_percent(a, b, c, n_items, n_trials, missing):
    """1,000 simulated data sets (4 batches with their own bootstrap seed) of 100 videos, moderate and high judge
    noise: the share of 95% intervals that hold the population YES rate a / (a + b) is 0.95 +- 0.02."""
    rng = np.random.default_rng(6)
    hits = []
    for batch in range(4):
        data = simulate(rng, 250, 100, n_items, n_trials, a, b, c, missing)
        frame = metrics_frame(count_table(data, ["captioner"], 2), {"yes": yes_rate}, n_resamples=1000, seed=batch,
                              scale=1.0)
        assert (frame["ci_kind"] == "video+trial").all()
        hits.append(((frame["ci_low"] <= a / (a + b)) & (a / (a + b) <= frame["ci_high"])).to_numpy())
    coverage = np.concatenate(hits).mean()
    assert coverage == pytest.approx(0.95, abs=0.02)
