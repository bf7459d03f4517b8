"""LVCap-Eval S_s and AutoDQ-style S_e against hand-computed values."""

import polars as pl
import pytest

from engine.protocols.lvcap.metrics import compute_metrics, duration_bucket

E, N, C = 1, 0, 2  # entailment, neutral, contradiction


def table(spec):
    rows = []
    for video, step, codes in spec:
        for k, code in enumerate(codes):
            rows.append(dict(item_id=video, task="t", video_id=video, captioner="m", prompt_id="p", frame_spec="f",
                             step=step, sub_index=k, verdict=code))
    return pl.DataFrame(rows, schema_overrides={"verdict": pl.Int8})


SPEC = [("a", "entail_p", [E, N]), ("a", "entail_r", [E, E, C, N]), ("a", "scene", [1, 0]),
        ("b", "entail_p", [E]), ("b", "entail_r", [N, -1]), ("b", "scene", [-1])]
ITEMS = pl.DataFrame({"video_id": ["a", "b"], "item_id": ["a", "b"], "category": [None, None],
                      "extra": ['{"duration": 30}', '{"duration": 400}']})


def get(frame, metric, bucket="all"):
    return frame.filter((pl.col("metric") == metric) & (pl.col("bucket") == bucket)).row(0, named=True)


def test_autodq_video_average_by_hand():
    out = compute_metrics(table(SPEC), items=ITEMS, n_resamples=100)
    # a: P=1/2, R=2/4; b: P=1/1, R=0/2 (the unjudged event counts as unmatched)
    p, r = (0.5 + 1.0) / 2, (0.5 + 0.0) / 2
    assert get(out, "event_precision")["value"] == pytest.approx(100 * p)
    assert get(out, "event_recall")["value"] == pytest.approx(100 * r)
    assert get(out, "S_e")["value"] == pytest.approx(100 * 2 * p * r / (p + r))
    assert get(out, "S_e")["n_no_verdict"] == 1 and get(out, "S_e")["n"] == 8
    assert get(out, "S_s")["value"] == pytest.approx(100 / 3)
    assert get(out, "S_e", "<1min")["value"] == pytest.approx(50.0)
    assert get(out, "S_s", "5min-15min")["value"] == pytest.approx(0.0)


def test_pooled_and_paper_modes():
    pooled = compute_metrics(table(SPEC), items=ITEMS, n_resamples=0, event_average="pooled")
    assert get(pooled, "event_precision")["value"] == pytest.approx(100 * 2 / 3)
    assert get(pooled, "event_recall")["value"] == pytest.approx(100 * 2 / 6)
    assert set(pooled["mode"]) == {"strict/pooled"}
    paper = compute_metrics(table(SPEC), items=ITEMS, n_resamples=0, paper_compatible=True)
    assert get(paper, "event_recall")["value"] == pytest.approx(50.0)  # video b dropped as AutoDQ does
    assert get(paper, "S_s")["value"] == pytest.approx(50.0)
    assert get(paper, "S_e", "5min-15min")["value"] is None and get(paper, "S_e", "5min-15min")["n_no_verdict"] == 1


def test_ci_deterministic_with_seed_and_contains_value():
    spec = SPEC + [(v, "entail_p", [E, N, E]) for v in "cdefg"] + [(v, "entail_r", [N, E]) for v in "cdefg"]
    a = compute_metrics(table(spec), n_resamples=300, seed=5)
    assert a.equals(compute_metrics(table(spec), n_resamples=300, seed=5))
    row = get(a, "S_e", "unknown")
    assert row["ci_low"] <= row["value"] <= row["ci_high"]


def test_duration_buckets():
    assert duration_bucket(30) == "<1min" and duration_bucket(60) == "1min-5min" and duration_bucket(4000) == ">=30min"
    assert duration_bucket(None) == "unknown"
