"""VidCapBench Acc / Pre / Cov / Con, trial statistics and the consistency split, against hand-computed values."""

import numpy as np
import polars as pl
import pytest

from engine.protocols.vidcapbench.metrics import compute_metrics

D, C, B, A = 0, 1, 2, 3  # score -1, 0, 1, 2


def table(trials):
    rows = []
    for trial, codes in enumerate(trials):
        for i, (video, code) in enumerate(codes):
            rows.append(dict(item_id=f"q{i}", task="t", video_id=video, captioner="m", prompt_id="p", frame_spec="f",
                             step="score", trial=trial, verdict=code))
    return pl.DataFrame(rows, schema_overrides={"verdict": pl.Int8, "trial": pl.Int16})


T0 = [("a", A), ("a", B), ("b", C), ("b", D), ("c", A)]
T1 = [("a", A), ("a", A), ("b", C), ("b", -1), ("c", A)]
CAPS = pl.DataFrame({"captioner": "m", "prompt_id": "p", "frame_spec": "f", "video_id": ["a", "b", "c"],
                     "n_tokens": [100, 200, 300]})


def get(frame, metric, consistency="all", dimension="all"):
    return frame.filter((pl.col("metric") == metric) & (pl.col("consistency") == consistency)
                        & (pl.col("dimension") == dimension)).row(0, named=True)


def official(counts):
    a, b, c, d = counts
    return 100 * a / (a + b + c + d), 100 * (a + b) / (a + b + d), 100 * (a + b + d) / (a + b + c + d)


def test_pooled_trial_stats_and_conciseness():
    out = compute_metrics(table([T0, T1]), captions=CAPS, n_resamples=200, seed=2, paper_compatible=True)
    acc0, pre0, cov0 = official((2, 1, 1, 1))
    acc1, pre1, cov1 = official((3, 0, 1, 0))
    assert get(out, "Acc")["value"] == pytest.approx(100 * 5 / 9)
    assert get(out, "Acc_mean")["value"] == pytest.approx((acc0 + acc1) / 2)
    assert get(out, "Acc_std")["value"] == pytest.approx(np.std([acc0, acc1]))
    assert get(out, "Pre_std")["value"] == pytest.approx(np.std([pre0, pre1]))
    assert get(out, "Cov_mean")["value"] == pytest.approx((cov0 + cov1) / 2)
    assert get(out, "Con")["value"] == pytest.approx(100 * (100 * 5 / 9) / 200)  # mean tokens 200
    assert get(out, "Acc")["n_no_verdict"] == 1


def test_strict_mode_keeps_unjudged_questions_in_acc_and_cov():
    out = compute_metrics(table([T1]), n_resamples=0)
    assert get(out, "Acc")["value"] == pytest.approx(100 * 3 / 5)
    assert get(out, "Cov")["value"] == pytest.approx(100 * 3 / 5)
    assert get(out, "Pre")["value"] == pytest.approx(100.0)


def test_consistency_split():
    out = compute_metrics(table([T0, T1]), n_resamples=0)
    # consistent: q0 (A, A), q2 (C, C), q4 (A, A); q1 differs, q3 has a missing verdict
    assert get(out, "Acc", "consistent")["value"] == pytest.approx(100 * 4 / 6)
    assert get(out, "Acc", "consistent")["n"] == 6
    assert get(out, "Acc", "inconsistent")["value"] == pytest.approx(100 * 1 / 4)
    assert get(out, "Acc", "inconsistent")["n_no_verdict"] == 1


def test_dimensions_from_items_and_deterministic_ci():
    items = pl.DataFrame({"task": "t", "item_id": [f"q{i}" for i in range(5)],
                          "category": ["lighting", "events", "events", "common sense", "body movements"]})
    out = compute_metrics(table([T0]), items=items, n_resamples=100, seed=4)
    assert get(out, "Acc", dimension="content")["value"] == pytest.approx(0.0)  # B, C
    assert get(out, "Pre", dimension="aesthetics")["value"] == pytest.approx(100.0)
    assert out.equals(compute_metrics(table([T0]), items=items, n_resamples=100, seed=4))
