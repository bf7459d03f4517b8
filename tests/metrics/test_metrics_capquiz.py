"""CapQuiz metrics against hand-computed CapP / CapR / CapF1 on small verdict tables, with the paper's ten
question types, overridable type maps, and judge / seed / trial as grouping columns."""

import json

import polars as pl
import pytest

from capeval.engine.protocols.capquiz.metrics import TYPE_FAMILY, compute_metrics
from capeval.engine.protocols.capquiz.types import load_type_map

CD, TP, FP, NV = 0, 1, 2, -1


def table(rows, judge="j", seed=0, trial=0, start=0):
    return pl.DataFrame(
        [dict(request_key=f"r{judge}{trial}{i}", protocol="capquiz", task="t", item_id=f"q{start + i}", video_id=v,
              captioner="m", prompt_id="p", frame_spec="f", judge=judge, seed=seed, trial=trial, verdict=c,
              parse_status=0 if c >= 0 else 2)
         for i, (v, _, c) in enumerate(rows)],
        schema_overrides={"verdict": pl.Int8, "parse_status": pl.Int8, "seed": pl.Int64, "trial": pl.Int16})


def items(rows):
    return pl.DataFrame({"task": ["t"] * len(rows), "item_id": [f"q{i}" for i in range(len(rows))],
                         "category": [t for _, t, _ in rows]})


ROWS = [("a", "Entity", TP), ("a", "Entity", FP), ("a", "Causal Reasoning", CD), ("b", "Causal Reasoning", TP),
        ("b", "Entity", NV), ("c", "Action", TP), ("c", "Causal Reasoning", FP)]


def get(frame, metric, family="all", qtype="all", **where):
    cond = (pl.col("metric") == metric) & (pl.col("family") == family) & (pl.col("question_type") == qtype)
    for k, v in where.items():
        cond = cond & (pl.col(k) == v)
    row = frame.filter(cond)
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
    # Entity: TP=1, FP=1, NV=1
    assert get(out, "CapP", "Descriptive", "Entity")["value"] == pytest.approx(50.0)
    assert get(out, "CapR", "Descriptive", "Entity")["value"] == pytest.approx(100 / 3)
    # Descriptive = Entity + Action: TP=2, FP=1, NV=1
    assert get(out, "CapR", "Descriptive")["value"] == pytest.approx(50.0)
    # Inferential = Causal Reasoning: TP=1, FP=1, CD=1
    assert get(out, "CapP", "Inferential")["value"] == pytest.approx(50.0)
    assert get(out, "CapR", "Inferential", "Causal Reasoning")["value"] == pytest.approx(100 / 3)
    assert set(out["mode"]) == {"strict"}
    assert get(out, "CapP", "Descriptive", "Entity")["inferred"] is False


def test_the_papers_ten_types_map_to_both_groups_and_inferred_groups_are_marked():
    names = ["Entity", "Attribute", "Action", "Event", "Setting", "Relational Reasoning", "Causal Reasoning",
             "Interpretive Reasoning", "Intent & Emotion Reasoning", "Grounding Reasoning"]
    rows = [(f"v{i}", n, TP) for i, n in enumerate(names)]
    out = compute_metrics(table(rows), items=items(rows), n_resamples=0)
    assert "unmapped" not in set(out["family"])
    assert get(out, "CapR", "Descriptive")["n"] == 5 and get(out, "CapR", "Inferential")["n"] == 5
    assert get(out, "CapP", "Descriptive", "Event")["inferred"] is True
    assert get(out, "CapP", "Inferential", "Causal Reasoning")["inferred"] is False
    assert get(out, "CapP", "Inferential")["inferred"] is True  # some of its types are inferred
    assert len(TYPE_FAMILY) == 10
    # spelling variants of the same names still map
    variants = [("v0", "intent_and_emotion", TP), ("v1", "causal", FP), ("v2", "RELATIONAL-reasoning", TP)]
    out = compute_metrics(table(variants), items=items(variants), n_resamples=0)
    assert set(out["family"]) == {"Inferential", "all"}


def test_paper_mode_drops_no_verdict_from_denominator_and_says_so():
    out = compute_metrics(table(ROWS), items=items(ROWS), n_resamples=50, paper_compatible=True)
    assert get(out, "CapR")["value"] == pytest.approx(100 * 3 / 6)
    assert get(out, "CapR")["n_no_verdict"] == 1
    assert set(out["mode"]) == {"paper"}
    assert set(compute_metrics(table(ROWS), n_resamples=0, mode="official")["mode"]) == {"official"}


def test_all_parse_failures_give_null_values_not_errors():
    rows = [("a", "Entity", NV), ("b", "Entity", NV)]
    out = compute_metrics(table(rows), items=items(rows), n_resamples=50)
    assert get(out, "CapP")["value"] is None and get(out, "CapP")["n_no_verdict"] == 2
    # strict counts unanswered questions against recall, but with no verdict at all there is no score (issue 16)
    assert get(out, "CapR")["value"] is None and get(out, "CapR")["ci_low"] is None
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


def test_judge_seed_and_trial_are_grouping_columns():
    first = [("a", "Entity", TP), ("b", "Entity", TP)]
    second = [("a", "Entity", FP), ("b", "Entity", CD)]
    frame = pl.concat([table(first, judge="j1", seed=0, trial=0), table(second, judge="j1", seed=1, trial=1),
                       table(second, judge="j2", seed=0, trial=0)])
    out = compute_metrics(frame, items=items(first), n_resamples=0)
    assert get(out, "CapR", judge="j1", trial="0")["value"] == pytest.approx(100.0)
    assert get(out, "CapR", judge="j1", trial="1")["value"] == pytest.approx(0.0)
    assert get(out, "CapP", judge="j2", seed="0")["value"] == pytest.approx(0.0)
    assert out.filter(pl.col("metric") == "CapR").height == 3 * 3  # 3 runs x (type, family, overall)


def test_unmapped_types_are_kept_and_type_maps_come_from_mappings_json_and_toml(tmp_path):
    rows = [("a", "Mystery Type", TP), ("b", "Causal", FP)]
    out = compute_metrics(table(rows), items=items(rows), n_resamples=20)
    assert get(out, "CapP", "unmapped", "Mystery Type")["value"] == pytest.approx(100.0)
    assert get(out, "CapP", "Inferential", "Causal")["value"] == pytest.approx(0.0)
    custom = {"mystery type": "Inferential", "Causal": "Inferential"}
    toml = tmp_path / "types.toml"
    toml.write_text('[[question_type]]\nname = "Mystery Type"\ngroup = "Inferential"\n\n'
                    '[[question_type]]\nname = "Causal Reasoning"\ngroup = "Inferential"\ninferred = true\n')
    (tmp_path / "types.json").write_text(json.dumps(custom))
    for spec in (custom, json.dumps(custom), str(tmp_path / "types.json"), str(toml)):
        got = compute_metrics(table(rows), items=items(rows), n_resamples=0, type_families=spec)
        assert get(got, "CapP", "Inferential")["value"] == pytest.approx(50.0), spec
        assert "unmapped" not in set(got["family"])
    assert load_type_map(str(toml))["Causal Reasoning"] == ("Inferential", True)
    with pytest.raises(ValueError, match="type_families"):
        compute_metrics(table(rows), items=items(rows), n_resamples=0, type_families="no/such/file.toml")


# video a: TP TP TP FP; video b: CD; video c: TP FP
PER_VIDEO_ROWS = [("a", "Entity", TP), ("a", "Entity", TP), ("a", "Action", TP), ("a", "Action", FP),
                  ("b", "Entity", CD), ("c", "Entity", TP), ("c", "Action", FP)]


def test_per_video_averaging_differs_from_pooling_by_hand():
    """Pooled: CapP = 4/6, CapR = 4/7, CapF1 = 2*4/(7+4+2). Per video (a, b, c): P = 3/4, -, 1/2 -> mean over the
    2 videos with a stated answer; R = 3/4, 0, 1/2 -> mean over 3 videos; F1 = 2PR/(P+R) of those two means."""
    v, i = table(PER_VIDEO_ROWS), items(PER_VIDEO_ROWS)
    pooled = compute_metrics(v, items=i, n_resamples=0)
    per_video = compute_metrics(v, items=i, n_resamples=300, seed=2, average="per_video")
    assert get(pooled, "CapP")["value"] == pytest.approx(100 * 4 / 6)
    assert get(pooled, "CapR")["value"] == pytest.approx(100 * 4 / 7)
    assert get(pooled, "CapF1")["value"] == pytest.approx(100 * 8 / 13)
    assert get(per_video, "CapP")["value"] == pytest.approx(100 * (3 / 4 + 1 / 2) / 2)
    assert get(per_video, "CapR")["value"] == pytest.approx(100 * (3 / 4 + 0 + 1 / 2) / 3)
    p, r = (3 / 4 + 1 / 2) / 2, (3 / 4 + 0 + 1 / 2) / 3
    assert get(per_video, "CapF1")["value"] == pytest.approx(100 * 2 * p * r / (p + r))
    # per family: Entity = a (TP TP), b (CD), c (TP) -> R = 1, 0, 1
    assert get(per_video, "CapR", family="Descriptive", qtype="Entity")["value"] == pytest.approx(100 * 2 / 3)
    assert set(pooled["average"]) == {"pooled"} and set(per_video["average"]) == {"per_video"}
    for metric in ("CapP", "CapR", "CapF1"):
        row = get(per_video, metric)
        assert row["ci_low"] <= row["value"] <= row["ci_high"]
        assert (row["n"], row["n_no_verdict"]) == (7, 0)
    # the CI resamples videos: the same seed gives the same interval, the per-video values are its replicates' means
    again = compute_metrics(v, items=i, n_resamples=300, seed=2, average="per_video")
    assert get(again, "CapR")["ci_low"] == get(per_video, "CapR")["ci_low"]


def test_per_video_counts_no_verdict_like_pooling_and_bad_average_is_an_error():
    rows = [("a", "Entity", TP), ("a", "Entity", NV), ("b", "Entity", TP)]
    strict = compute_metrics(table(rows), items=items(rows), n_resamples=0, average="per_video")
    paper = compute_metrics(table(rows), items=items(rows), n_resamples=0, average="per_video", paper_compatible=True)
    assert get(strict, "CapR")["value"] == pytest.approx(100 * (1 / 2 + 1) / 2)
    assert get(paper, "CapR")["value"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="average"):
        compute_metrics(table(rows), items=items(rows), n_resamples=0, average="per-video")


def test_a_sweep_passes_average_to_the_metrics():
    from capeval.engine.protocols.capquiz import PROTOCOL

    # the sweep's judge stage hands a cell's metrics exactly protocol.metric_params(cell params)
    assert PROTOCOL.metric_params({"mode": "official", "average": "per_video", "prompts": "p.toml"}) == \
        {"mode": "official", "average": "per_video"}


def test_a_bad_average_stops_before_any_request_is_built():
    import pyarrow as pa

    from capeval.engine.protocols.capquiz import PROTOCOL

    with pytest.raises(ValueError, match="average"):
        PROTOCOL.build_requests(pa.table({"item_id": ["q"]}), pa.table({"video_id": ["v"]}), judge="j",
                                judge_revision="r", average="mean")


@pytest.mark.parametrize("ids", [str, int])
def test_a_verdict_takes_the_type_of_the_first_item_with_its_task_and_item_id(ids):
    """Question types are looked up on (task, item_id): the first of two items with the same keys wins, an item id
    of another task is another item, and a verdict with no item, or only an item with a null key, is 'unknown'."""
    verdicts = pl.DataFrame(
        [dict(task=task, item_id=None if item is None else ids(item), video_id=f"v{i}", captioner="m", prompt_id="p",
              frame_spec="f", judge="j", seed=0, trial=0, verdict=TP)
         for i, (task, item) in enumerate([("t", 0), ("u", 0), ("t", 1), ("t", 1), ("t", 2), ("t", 9), (None, 0),
                                           ("t", None)])],
        schema_overrides={"verdict": pl.Int8, "seed": pl.Int64, "trial": pl.Int16})
    item_rows = [("t", 0, "Entity"), ("u", 0, "Action"), ("t", 1, "Entity"), ("t", 1, "Action"),
                 (None, 2, "Action"), ("t", None, "Action")]
    items = pl.DataFrame({"task": [t for t, _, _ in item_rows],
                          "item_id": [None if i is None else ids(i) for _, i, _ in item_rows],
                          "category": [c for _, _, c in item_rows]})
    out = compute_metrics(verdicts, items=items, n_resamples=0)
    counts = {row["question_type"]: row["n"] for row in out.filter(pl.col("metric") == "CapR").iter_rows(named=True)
              if row["question_type"] != "all"}
    assert counts == {"Entity": 3, "Action": 1, "unknown": 4}
