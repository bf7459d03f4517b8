"""CapQuiz metrics against hand-computed CapP / CapR / CapF1 on small verdict tables."""

import polars as pl
import pytest

from engine.protocols.capquiz.metrics import TYPE_FAMILY, compute_metrics

CD, TP, FP, NV = 0, 1, 2, -1


def table(rows):
    return pl.DataFrame(
        [dict(request_key=f"r{i}", protocol="capquiz", task="t", item_id=f"q{i}", video_id=v, captioner="m",
              prompt_id="p", frame_spec="f", judge="j", verdict=c, parse_status=0 if c >= 0 else 2)
         for i, (v, _, c) in enumerate(rows)],
        schema_overrides={"verdict": pl.Int8, "parse_status": pl.Int8})


def items(rows):
    return pl.DataFrame({"task": ["t"] * len(rows), "item_id": [f"q{i}" for i in range(len(rows))],
                         "category": [t for _, t, _ in rows]})


ROWS = [("a", "object", TP), ("a", "object", FP), ("a", "causal", CD), ("b", "causal", TP), ("b", "object", NV),
        ("c", "action", TP), ("c", "causal", FP)]


def get(frame, metric, family="all", qtype="all"):
    row = frame.filter((pl.col("metric") == metric) & (pl.col("family") == family) & (pl.col("question_type") == qtype))
    assert row.height == 1, row
    return row.row(0, named=True)


def test_overall_and_per_type_by_hand():
    out = compute_metrics(table(ROWS), items=items(ROWS), n_resamples=200, seed=1)
    # overall: TP=3, FP=2, CD=1, no verdict=1 -> strict N=7
    p, r = 3 / 5, 3 / 7
    assert get(out, "CapP")["value"] == pytest.approx(100 * p)
    assert get(out, "CapR")["value"] == pytest.approx(100 * r)
    assert get(out, "CapF1")["value"] == pytest.approx(100 * 2 * p * r / (p + r))
    assert get(out, "CapR")["n_no_verdict"] == 1 and get(out, "CapR")["n"] == 6
    # object: TP=1, FP=1, NV=1
    assert get(out, "CapP", "Descriptive", "object")["value"] == pytest.approx(50.0)
    assert get(out, "CapR", "Descriptive", "object")["value"] == pytest.approx(100 / 3)
    # Descriptive family = object + action: TP=2, FP=1, NV=1
    assert get(out, "CapR", "Descriptive")["value"] == pytest.approx(50.0)
    # Inferential = causal: TP=1, FP=1, CD=1
    assert get(out, "CapP", "Inferential")["value"] == pytest.approx(50.0)
    assert get(out, "CapR", "Inferential", "causal")["value"] == pytest.approx(100 / 3)
    assert set(out["mode"]) == {"strict"}


def test_paper_mode_drops_no_verdict_from_denominator_and_says_so():
    out = compute_metrics(table(ROWS), items=items(ROWS), n_resamples=50, paper_compatible=True)
    assert get(out, "CapR")["value"] == pytest.approx(100 * 3 / 6)
    assert get(out, "CapR")["n_no_verdict"] == 1
    assert set(out["mode"]) == {"paper"}


def test_all_parse_failures_give_null_values_not_errors():
    rows = [("a", "object", NV), ("b", "object", NV)]
    out = compute_metrics(table(rows), items=items(rows), n_resamples=50)
    assert get(out, "CapP")["value"] is None and get(out, "CapP")["n_no_verdict"] == 2
    assert get(out, "CapR")["value"] == pytest.approx(0.0)  # strict: unanswered questions count against recall
    paper = compute_metrics(table(rows), items=items(rows), n_resamples=50, paper_compatible=True)
    assert get(paper, "CapR")["value"] is None


def test_one_video_has_degenerate_ci_and_seeded_ci_is_deterministic():
    one = [r for r in ROWS if r[0] == "a"]
    out = compute_metrics(table(one), items=items(one), n_resamples=100)
    row = get(out, "CapP")
    assert row["ci_low"] == row["ci_high"] == pytest.approx(row["value"])
    a = compute_metrics(table(ROWS), items=items(ROWS), n_resamples=300, seed=7)
    b = compute_metrics(table(ROWS), items=items(ROWS), n_resamples=300, seed=7)
    assert a.equals(b)
    low, high = get(a, "CapR")["ci_low"], get(a, "CapR")["ci_high"]
    assert low <= get(a, "CapR")["value"] <= high and low < high


def test_unmapped_types_are_kept_and_family_map_covers_ten_types():
    assert len(TYPE_FAMILY) == 10 and set(TYPE_FAMILY.values()) == {"Descriptive", "Inferential"}
    rows = [("a", "Mystery Type", TP), ("b", "Causal", FP)]
    out = compute_metrics(table(rows), items=items(rows), n_resamples=20)
    assert get(out, "CapP", "unmapped", "Mystery Type")["value"] == pytest.approx(100.0)
    assert get(out, "CapP", "Inferential", "Causal")["value"] == pytest.approx(0.0)
    custom = compute_metrics(table(rows), items=items(rows), n_resamples=20, type_families={"mystery type": "Inferential"})
    assert get(custom, "CapP", "Inferential")["value"] == pytest.approx(100.0)
