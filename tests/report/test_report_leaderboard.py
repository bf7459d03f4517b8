"""Leaderboards from real compute_metrics output: wide shape, CIs, breakdown, small-sample and degenerate
warnings, and an average that one undefined task does not blank without saying so."""

from __future__ import annotations

import polars as pl
import pytest

from _verdicts import random_codes, verdict_rows
from capeval.engine.protocols.capability.metrics import compute_metrics as capability_metrics
from capeval.engine.protocols.capquiz.metrics import compute_metrics as capquiz_metrics
from capeval.engine.report.leaderboard import format_leaderboard, leaderboard

A = {"captioner": "m1", "prompt_id": "p", "frame_spec": "uniform:8"}
B = {"captioner": "m2", "prompt_id": "p", "frame_spec": "uniform:8"}


def _capquiz_table(n_videos: int) -> pl.DataFrame:
    v = pl.concat([verdict_rows(A, random_codes(n_videos, 4, [0.2, 0.6, 0.2], 1)),
                   verdict_rows(B, [[1, 1, 0, 0]] * n_videos)])
    return capquiz_metrics(v.drop("dataset", "protocol_name"), n_resamples=200), v


def test_wide_table_and_warnings():
    metrics, v = _capquiz_table(8)
    n_videos = v.group_by("captioner", "prompt_id", "frame_spec").agg(pl.col("video_id").n_unique()
                                                                        .alias("n_videos"))
    lb = leaderboard(metrics, "capquiz", n_videos=n_videos)
    assert lb.metrics == ["CapF1", "CapP", "CapR"] and lb.table.height == 2
    overall = metrics.filter((pl.col("family") == "all") & (pl.col("question_type") == "all"))
    for r in overall.iter_rows(named=True):
        row = lb.table.filter(pl.col("captioner") == r["captioner"]).row(0, named=True)
        assert row[r["metric"]] == pytest.approx(r["value"])
        assert row[f"{r['metric']}_low"] == pytest.approx(r["ci_low"])
    # m2 answers every question right or "cannot determine": CapP is 100 in every resample
    assert any("m2" in w and "CapP" in w and "degenerate" in w for w in lb.warnings)
    assert any("8 videos (< 20)" in w for w in lb.warnings)
    text = format_leaderboard(lb)
    assert "CapF1" in text and "degenerate" in text


def test_enough_videos_no_small_sample_warning():
    metrics, v = _capquiz_table(25)
    n_videos = v.group_by("captioner", "prompt_id", "frame_spec").agg(pl.col("video_id").n_unique()
                                                                        .alias("n_videos"))
    lb = leaderboard(metrics, "capquiz", n_videos=n_videos)
    assert not any("< 20" in w for w in lb.warnings)


def test_undefined_task_does_not_blank_the_average_silently():
    rows = [verdict_rows(A, [[1, 2, 1]] * 5, protocol="capability", task="object_category"),
            verdict_rows(A, [[0, 0, 0]] * 5, protocol="capability", task="scene"),  # no hit: precision 0/0
            verdict_rows(A, [[1, 1, 0]] * 5, protocol="capability", task="style")]
    v = pl.concat(rows).with_columns(pl.concat_str([pl.col("task"), pl.col("item_id")]).alias("item_id"))
    v = v.with_columns(pl.lit("-").alias("prompt_id"))
    metrics = capability_metrics(v.drop("dataset", "protocol_name", "protocol"), n_resamples=100)
    avg = metrics.filter((pl.col("task") == "avg") & (pl.col("metric") == "precision"))
    assert avg["value"][0] is None  # the official rule: one undefined task makes the average undefined
    lb = leaderboard(metrics, "capability")
    row = lb.table.row(0, named=True)
    assert row["precision"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert row["precision_low"] is None and "scene" in row["note"] and "2/3" in row["note"]
    assert row["recall"] is not None and "recall" not in row["note"]  # recall is defined for every task
    assert lb.breakdown.height == 3 and "task" in lb.breakdown_columns


def test_capability_score_table_gives_the_same_leaderboard_shape(shared_data):
    """`capeval capability score` writes a wide table; its leaderboard has the sweep's shape and the paper's avg."""
    from capeval.engine.protocols.capability.cli import score_table

    wide = score_table(shared_data / "capability" / "annotations",
                       shared_data / "capability" / "judgments" / "gpt-4o-0806", resamples=50)
    lb = leaderboard(wide.with_columns(pl.lit("gpt-4o-0806").alias("captioner")), "capability")
    assert lb.system_columns[0] == "captioner" and lb.metrics == ["f1", "precision", "recall", "hit_rate"]
    row = lb.table.row(0, named=True)
    paper = {"precision": 79.2, "recall": 56.5, "f1": 63.6, "hit_rate": 73.4}  # the paper's Table 3 average
    for m, v in paper.items():
        assert abs(row[m] - v) <= 0.15 and row[f"{m}_low"] < row[m] < row[f"{m}_high"]
    assert lb.breakdown.height == 13 and lb.breakdown_columns == ["dimension"]


def test_terminal_headline_keeps_seed_rows_and_drops_breakdowns():
    from capeval.engine.report.results import headline

    metrics, _ = _capquiz_table(5)
    rows = [metrics.with_columns(pl.lit(s).alias("seed"), pl.lit("complete").alias("cell_status"),
                                 pl.lit("capquiz").alias("protocol")) for s in ("0", "1")]
    head = headline(pl.concat(rows))
    assert head.height == 2 * 2 * 3  # 2 seeds x 2 captioners x 3 metrics: only the overall rows
    assert "seed" in head.columns and set(head["seed"]) == {"0", "1"}


def test_score_command_table_leads_with_the_leaderboard():
    from capeval.engine.report.metrics_text import format_table, guess_protocol

    metrics, _ = _capquiz_table(6)
    text = format_table(metrics)
    assert guess_protocol(metrics) == "capquiz"
    assert text.startswith("== capquiz leaderboard") and "-- every metric row --" in text
    assert format_table(metrics, leaderboard=False).splitlines()[0].startswith("captioner")
