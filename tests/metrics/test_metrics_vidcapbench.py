"""VidCapBench Acc / Pre / Cov / Con: the mean over judge seeds (headline) and pooled, the temperature-0 flag,
token counts given with the captions vs the captioner's, official-mode null metrics with reasons, the consistency
split, and the QA-file loader."""

import json
import warnings

import numpy as np
import polars as pl
import pytest

from capeval.engine.datasets.jsonl import DatasetFormatError
from capeval.engine.protocols.vidcapbench.release import load_vidcapbench
from capeval.engine.protocols.vidcapbench.metrics import compute_metrics

D, C, B, A = 0, 1, 2, 3  # score -1, 0, 1, 2


def table(trials, status=None):
    rows = []
    for trial, codes in enumerate(trials):
        for i, (video, code) in enumerate(codes):
            rows.append(dict(item_id=f"q{i}", task="t", video_id=video, captioner="m", prompt_id="p", frame_spec="f",
                             step="score", trial=trial, verdict=code,
                             parse_status=(status or {}).get((trial, i), 0 if code >= 0 else 2)))
    return pl.DataFrame(rows, schema_overrides={"verdict": pl.Int8, "trial": pl.Int16, "parse_status": pl.Int8})


T0 = [("a", A), ("a", B), ("b", C), ("b", D), ("c", A)]
T1 = [("a", A), ("a", A), ("b", C), ("b", -1), ("c", A)]
CAPS = pl.DataFrame({"captioner": "m", "prompt_id": "p", "frame_spec": "f", "video_id": ["a", "b", "c", "d"],
                     "n_tokens": [100, 200, 300, 400]})


def get(frame, metric, consistency="all", dimension="all"):
    rows = frame.filter((pl.col("metric") == metric) & (pl.col("consistency") == consistency)
                        & (pl.col("dimension") == dimension))
    assert rows.height == 1, rows
    return rows.row(0, named=True)


def official(counts):
    a, b, c, d = counts
    return 100 * a / (a + b + c + d), 100 * (a + b) / (a + b + d), 100 * (a + b + d) / (a + b + c + d)


def test_headline_is_the_mean_over_seeds_with_pooled_and_spread_when_sampling():
    out = compute_metrics(table([T0, T1]), captions=CAPS, n_resamples=200, seed=2, paper_compatible=True,
                          temperature=1.0)
    acc0, pre0, cov0 = official((2, 1, 1, 1))
    acc1, pre1, cov1 = official((3, 0, 1, 0))
    acc = get(out, "Acc")
    assert acc["value"] == pytest.approx((acc0 + acc1) / 2)
    assert acc["pooled"] == pytest.approx(100 * 5 / 9)
    assert acc["seed_std"] == pytest.approx(np.std([acc0, acc1]))
    assert acc["n_seeds"] == 2 and acc["seeds_note"] is None
    assert acc["ci_low"] <= acc["value"] <= acc["ci_high"]
    assert get(out, "Pre")["seed_std"] == pytest.approx(np.std([pre0, pre1]))
    assert get(out, "Cov")["value"] == pytest.approx((cov0 + cov1) / 2)
    # Con divides by the mean over ALL caption lines of the group (d has no question): 250 tokens
    con = get(out, "Con")
    assert con["value"] == pytest.approx(100 * acc["value"] / 250)
    assert con["tokens_source"].startswith("n_tokens (stored with the captions") and con["avg_tokens"] == 250
    declared = compute_metrics(table([T0]), captions=CAPS, n_resamples=0, con_tokens="n_tokens")
    assert get(declared, "Con")["tokens_source"] == "n_tokens (given with the captions)"
    # captions a captioner wrote (they have latencies): the same count, labelled as the captioner's
    timed = compute_metrics(table([T0]), captions=CAPS.with_columns(pl.lit(1.5).alias("latency_s")), n_resamples=0)
    assert get(timed, "Con")["tokens_source"] == "n_tokens (the captioner's count)"
    assert acc["n_no_verdict"] == 1


def test_several_seeds_at_temperature_zero_are_flagged_not_reported_as_a_spread():
    with pytest.warns(UserWarning, match="temperature 0"):
        out = compute_metrics(table([T0, T1]), n_resamples=0)  # strict mode sends temperature 0 by default
    acc = get(out, "Acc")
    assert acc["seed_std"] is None and "temperature 0" in acc["seeds_note"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = compute_metrics(table([T0]), n_resamples=0)
    assert get(one, "Acc")["seeds_note"] is None and get(one, "Acc")["n_seeds"] == 1


def test_given_token_counts_win_over_the_captioners_and_are_labelled():
    caps = CAPS.with_columns(pl.Series("t5_tokens", [10, 20, 30, 40]))
    out = compute_metrics(table([T1]), captions=caps, n_resamples=0)
    con = get(out, "Con")
    assert con["avg_tokens"] == 25 and con["tokens_source"].startswith("t5_tokens")
    assert con["value"] == pytest.approx(100 * get(out, "Acc")["value"] / 25)
    # one caption without a given count: the group falls back to the captioner's count, and says so
    partial = caps.with_columns(pl.when(pl.col("video_id") == "d").then(None).otherwise(pl.col("t5_tokens"))
                                .alias("t5_tokens"))
    assert get(compute_metrics(table([T1]), captions=partial, n_resamples=0), "Con")["tokens_source"].startswith(
        "n_tokens")


def test_strict_mode_keeps_unjudged_questions_in_acc_and_cov():
    out = compute_metrics(table([T1]), n_resamples=0)
    assert get(out, "Acc")["value"] == pytest.approx(100 * 3 / 5)
    assert get(out, "Cov")["value"] == pytest.approx(100 * 3 / 5)
    assert get(out, "Pre")["value"] == pytest.approx(100.0)
    assert set(out["mode"]) == {"strict"} and set(out["no_verdict"]) == {"counted"}


ITEMS = pl.DataFrame({"task": "t", "item_id": [f"q{i}" for i in range(5)],
                      "category": ["lighting", "events", "events", "color", "body movements"]})


def test_official_mode_null_metrics_say_why():
    out = compute_metrics(table([T1]), items=ITEMS, n_resamples=0, mode="official")
    assert set(out["mode"]) == {"official"}
    # no physics question at all: the official script divides by zero there
    physics = out.filter(pl.col("dimension") == "physics")
    assert physics.height == 3 and physics["value"].is_null().all()
    assert physics["reason"].str.contains("ZeroDivisionError").all()
    # content has q1 (A) and q2 (C): Pre = 100; motion has q4 (A)
    assert get(out, "Pre", dimension="content")["value"] == pytest.approx(100.0)
    assert get(out, "Acc")["reason"] is None
    # a judge reply with no content (backend ERROR) stops the official script: every metric null, said so
    crashed = compute_metrics(table([T1], status={(0, 3): 3}), items=ITEMS, n_resamples=0, mode="official")
    assert crashed["value"].is_null().all() and crashed["reason"].str.contains("no content").all()
    # the same table in strict mode is scored (the missing reply is one question without a verdict)
    assert get(compute_metrics(table([T1], status={(0, 3): 3}), n_resamples=0), "Acc")["value"] == pytest.approx(60)


def test_consistency_split_is_only_made_with_several_seeds():
    out = compute_metrics(table([T0, T1]), n_resamples=0, temperature=0.7)
    # consistent: q0 (A, A), q2 (C, C), q4 (A, A); q1 differs, q3 has a missing verdict
    cons = get(out, "Acc", "consistent")
    assert cons["pooled"] == pytest.approx(100 * 4 / 6) and cons["n"] == 6
    assert get(out, "Acc", "inconsistent")["pooled"] == pytest.approx(100 * 1 / 4)
    assert get(out, "Acc", "inconsistent")["n_no_verdict"] == 1
    assert set(compute_metrics(table([T0]), n_resamples=0)["consistency"]) == {"all"}


def test_dimensions_from_items_and_deterministic_ci():
    out = compute_metrics(table([T0]), items=ITEMS, n_resamples=100, seed=4)
    assert get(out, "Acc", dimension="content")["value"] == pytest.approx(0.0)  # B, C
    assert get(out, "Pre", dimension="aesthetics")["value"] == pytest.approx(50.0)  # A, D
    assert out.equals(compute_metrics(table([T0]), items=ITEMS, n_resamples=100, seed=4))


def test_loader_flattens_qa_pairs_and_maps_sub_categories(tmp_path):
    path = tmp_path / "VidCapBench_AE.jsonl"
    lines = [
        {"video_dir": "clip_01.mp4", "QA_pairs": [
            {"question": "What colour is the car?", "answer": "Red", "sub_category": "color", "key_point": "car"},
            {"question": "Where does the car drive?", "answer": "Along a coast road", "sub_category": "background"},
        ]},
        {"video_dir": "clip_02.mp4", "QA_pairs": [
            {"question_id": 7, "question": "How does the dog move?", "answer": "It jumps",
             "sub_category": "Body Movements"},
            {"question": "Is it raining?", "answer": "No", "sub_category": "weather"},
            {"question_id": 7, "question": "Does it jump twice?", "answer": "Yes", "sub_category": "object motion"},
        ]},
    ]
    path.write_text("\n".join(json.dumps(rec) for rec in lines) + "\n")
    items = load_vidcapbench(path).to_pylist()
    # a repeated question id keeps its pair, numbered by position (the official script scores every pair)
    assert [i["item_id"] for i in items] == ["clip_01.mp4#0", "clip_01.mp4#1", "clip_02.mp4#7", "clip_02.mp4#1",
                                             "clip_02.mp4#2"]
    assert [json.loads(i["extra"])["dimension"] for i in items] == ["aesthetics", "content", "motion", "other",
                                                                    "motion"]
    assert items[0]["video_id"] == "clip_01.mp4" and items[0]["annotation"] == "What colour is the car?"
    assert items[0]["answer"] == "Red" and json.loads(items[0]["extra"])["key_point"] == "car"
    # a JSON array of the same records loads the same
    (tmp_path / "qa.json").write_text(json.dumps(lines))
    assert load_vidcapbench(tmp_path / "qa.json").to_pylist() == items
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"video_dir": "v", "QA_pairs": [{"question": "q", "answer": "a"}]}) + "\n")
    with pytest.raises(DatasetFormatError, match=r"bad.jsonl:1: .*sub_category"):
        load_vidcapbench(bad)
