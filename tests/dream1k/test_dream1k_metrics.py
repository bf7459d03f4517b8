"""DREAM-1K metrics on hand-built verdicts: official per-source / OVERALL / bucket values as evaluate_dream_gpt.py
aggregates them (and equal to lvcap's, renamed), duration buckets in seconds pooling the sources, strict breakdowns,
the per-clip table and the paired statistic."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from capeval.engine.metrics.paired import per_video_stats
from capeval.engine.protocols.dream1k import metrics as d1k_metrics
from capeval.engine.protocols.dream1k.paired import paired_spec
from capeval.engine.registry import lookup

D1K = lookup("protocol", "dream1k")
LVCAP = lookup("protocol", "lvcap")

# item -> (source, duration s, n_subjects, n_shots, n_events, official (recall hits, n), (precision hits, n) or None
# for a rejected reply)
CLIPS = {
    "a": ("DREAM/youtube", 4.2, 1, 1, 3, (2, 3), (1, 2)),
    "b": ("DREAM/youtube", 4.8, 2, 2, 2, (1, 2), (2, 2)),
    "c": ("DREAM/videvo", 25.0, 2, 1, 6, (6, 6), (1, 4)),
    "d": ("DREAM/videvo", 7.0, 4, 3, 9, None, (1, 1)),  # Failed: its recall reply was rejected
    "e": ("DREAM/videvo", 3.0, 3, 2, 4, (0, 4), (0, 3)),
}


def items() -> pl.DataFrame:
    return pl.DataFrame([{"item_id": k, "video_id": k, "task": "events", "category": c[0],
                          "extra": json.dumps({"duration": c[1], "n_subjects": c[2], "n_shots": c[3],
                                               "n_events": c[4], "dataset": c[0]})} for k, c in CLIPS.items()])


def _row(item: str, step: str, verdict: int, detail, **extra) -> dict:
    return {"protocol": "dream1k", "task": "events", "item_id": item, "video_id": item, "captioner": "m",
            "prompt_id": "describe", "frame_spec": "uniform:8", "step": step, "sub_index": extra.get("sub_index", 0),
            "trial": 0, "verdict": verdict, "parse_status": 0 if verdict >= 0 else 3,
            "detail": None if detail is None else json.dumps(detail)}


def official_verdicts() -> pl.DataFrame:
    rows = []
    for item, (*_, rec, prec) in CLIPS.items():
        rows.append(_row(item, "extract", -1, {"events": ["x"] * (prec[1] if prec else 1)}))
        for step, hits in (("recall", rec), ("precision", prec)):
            if hits is None:
                rows.append(_row(item, step, -1, None))
            else:
                rows.append(_row(item, step, 0, {"relationships": [], "hits": hits[0], "n_events": hits[1],
                                                 "score": hits[0] / hits[1]}))
    return pl.DataFrame(rows)


def _f1(r, p):
    return 2 * r * p / (r + p) if r + p else float("nan")


def _value(frame, bucket, metric):
    rows = frame.filter((pl.col("bucket") == bucket) & (pl.col("metric") == metric))
    assert rows.height == 1, (bucket, metric, rows)
    return rows.row(0, named=True)


def test_official_overall_and_sources_as_the_official_code():
    m = D1K.compute_metrics(official_verdicts(), items=items(), n_resamples=0, mode="official")
    assert set(m["mode"]) == {"official"}
    yt_r, yt_p = (2 / 3 + 1 / 2) / 2, (1 / 2 + 1) / 2
    vv_r, vv_p = (1 + 0) / 2, (1 / 4 + 0) / 2  # d Failed: left out
    for bucket, r, p, n, failed in (("source:DREAM/youtube", yt_r, yt_p, 2, 0),
                                    ("source:DREAM/videvo", vv_r, vv_p, 2, 1),
                                    ("all", (yt_r + vv_r) / 2, (yt_p + vv_p) / 2, 4, 1)):
        assert _value(m, bucket, "recall")["value"] == pytest.approx(100 * r)
        assert _value(m, bucket, "precision")["value"] == pytest.approx(100 * p)
        row = _value(m, bucket, "F1")
        assert row["value"] == pytest.approx(100 * _f1(r, p))
        assert (row["n"], row["n_no_verdict"]) == (n, failed)
    # labelled extras: pooled events and the mean of per-clip F1s
    hits_r, n_r, hits_p, n_p = 2 + 1 + 6 + 0, 3 + 2 + 6 + 4, 1 + 2 + 1 + 0, 2 + 2 + 4 + 3
    assert _value(m, "all", "F1_pooled")["value"] == pytest.approx(100 * _f1(hits_r / n_r, hits_p / n_p))
    clip_f1 = [_f1(2 / 3, 1 / 2), _f1(1 / 2, 1), _f1(1, 1 / 4), 0.0]
    assert _value(m, "all", "F1_clip_mean")["value"] == pytest.approx(100 * np.mean(clip_f1))
    assert set(m["metric"]) == {"F1", "precision", "recall", "F1_pooled", "F1_clip_mean"}
    assert "event_scoring" not in m.columns and m["reading"].null_count() == 0


def test_official_count_buckets_pool_the_sources():
    m = D1K.compute_metrics(official_verdicts(), items=items(), n_resamples=0, mode="official")
    # subjects==2: b (youtube) and c (videvo), one mean over both clips
    assert _value(m, "subjects==2", "recall")["value"] == pytest.approx(100 * (1 / 2 + 1) / 2)
    assert _value(m, "subjects==2", "precision")["value"] == pytest.approx(100 * (1 + 1 / 4) / 2)
    assert _value(m, "events in [4, 5]", "F1")["n"] == 1  # e
    empty = _value(m, "subjects>=4", "F1")  # only d, which Failed
    assert empty["value"] is None and empty["n"] == 0
    assert {f"{k}{s}" for k in ("subjects", "shots") for s in ("<=1", "==2", "==3", ">=4")} <= set(m["bucket"])


def test_strict_count_buckets_are_labelled_as_lvcaps_official_ones():
    official = D1K.compute_metrics(official_verdicts(), items=items(), n_resamples=0, mode="official")
    lvcaps = {b for b in official["bucket"] if b.startswith(("subjects", "shots", "events"))}
    ours = {d1k_metrics.count_label(name, n) for name in d1k_metrics.COUNT_BUCKETS for n in range(12)}
    assert ours == lvcaps and len(ours) == 12


def test_official_numbers_are_lvcaps_renamed():
    verdicts = official_verdicts()
    ours = D1K.compute_metrics(verdicts, items=items(), n_resamples=200, mode="official")
    theirs = LVCAP.compute_metrics(verdicts, items=items(), n_resamples=200, mode="official", event_scoring="autodq")
    theirs = theirs.filter(~pl.col("bucket").str.starts_with("duration:"))
    names = d1k_metrics.METRIC_NAMES
    for row in theirs.iter_rows(named=True):
        mine = _value(ours, row["bucket"], names[row["metric"]])
        for k in ("value", "ci_low", "ci_high", "n", "n_no_verdict", "reading"):
            assert mine[k] == row[k], (row["bucket"], row["metric"], k)
    assert set(ours["bucket"]) - set(theirs["bucket"]) == {"duration:<=5s", "duration:5-10s", "duration:>20s"}


def test_duration_buckets_in_seconds_pool_the_sources():
    m = D1K.compute_metrics(official_verdicts(), items=items(), n_resamples=0, mode="official")
    # <=5s: a, b (youtube) and e (videvo): the mean over the three clips, not the mean of the two sources' means
    r, p = (2 / 3 + 1 / 2 + 0) / 3, (1 / 2 + 1 + 0) / 3
    assert _value(m, "duration:<=5s", "recall")["value"] == pytest.approx(100 * r)
    assert _value(m, "duration:<=5s", "F1")["value"] == pytest.approx(100 * _f1(r, p))
    assert _value(m, "duration:<=5s", "F1")["reading"] == d1k_metrics.DURATION_READING
    failed = _value(m, "duration:5-10s", "F1")  # d alone, Failed
    assert (failed["value"], failed["n"], failed["n_no_verdict"]) == (None, 0, 1)
    assert _value(m, "duration:>20s", "recall")["value"] == pytest.approx(100.0)
    custom = D1K.compute_metrics(official_verdicts(), items=items(), n_resamples=0, mode="official",
                                 duration_buckets="4.5,30")
    assert {b for b in custom["bucket"] if b.startswith("duration:")} == \
        {"duration:<=4.5s", "duration:4.5-30s"}
    no_duration = items().with_columns(pl.lit("{}").alias("extra"))
    assert {b for b in D1K.compute_metrics(official_verdicts(), items=no_duration, n_resamples=0)["bucket"]
            if b.startswith("duration:")} == {"duration:unknown"}


def test_duration_labels_and_edges():
    edges = d1k_metrics.check_duration_edges(None)
    assert [d1k_metrics.duration_label(s, edges) for s in (1.3, 5.0, 5.01, 10, 20, 49.3, None, float("nan"))] == \
        ["<=5s", "<=5s", "5-10s", "5-10s", "10-20s", ">20s", "unknown", "unknown"]
    assert d1k_metrics.check_duration_edges("2, 8") == (2.0, 8.0)
    for bad in ("10,5", "x", "0,5", ""):
        with pytest.raises(ValueError, match="duration_buckets"):
            d1k_metrics.check_duration_edges(bad)


# -- strict ----------------------------------------------------------------------------------------------------------
# item -> (labels of the reference events (recall), labels of the caption's events (precision)); None: unjudged
STRICT = {
    "a": (["entailment", "neutral", "entailment"], ["entailment", "contradiction"]),
    "b": (["entailment", "entailment"], ["neutral"]),
    "c": (["neutral", None], ["entailment"]),
    "e": (["entailment"], []),
}
CODES = {"neutral": 0, "entailment": 1, "contradiction": 2, None: -1}


def strict_verdicts() -> pl.DataFrame:
    rows = []
    for item, (ref, cap) in STRICT.items():
        rows.append(_row(item, "extract", -1, {"events": ["x"] * len(cap)}))
        for step, labels in (("entail_r", ref), ("entail_p", cap)):
            for i, label in enumerate(labels):
                rows.append(_row(item, step, CODES[label], None if label is None else {"label": label, "event": "x"},
                                 sub_index=i))
    return pl.DataFrame(rows)


def test_strict_overall_and_breakdowns():
    m = D1K.compute_metrics(strict_verdicts(), items=items(), n_resamples=0, mode="strict")
    assert set(m["mode"]) == {"strict"}
    # per clip R, P; a clip without caption events has no precision (left out of that average)
    r = {"a": 2 / 3, "b": 1.0, "c": 0.0, "e": 1.0}
    p = {"a": 1 / 2, "b": 0.0, "c": 1.0}
    R, P = np.mean(list(r.values())), np.mean(list(p.values()))
    assert _value(m, "all", "recall")["value"] == pytest.approx(100 * R)
    assert _value(m, "all", "precision")["value"] == pytest.approx(100 * P)
    assert _value(m, "all", "F1")["value"] == pytest.approx(100 * _f1(R, P))
    assert _value(m, "all", "F1")["n_no_verdict"] == 1
    # per source: youtube = a, b; videvo = c, e
    assert _value(m, "source:DREAM/youtube", "recall")["value"] == pytest.approx(100 * (2 / 3 + 1) / 2)
    assert _value(m, "source:DREAM/videvo", "precision")["value"] == pytest.approx(100.0)
    assert _value(m, "subjects==2", "recall")["value"] == pytest.approx(100 * (1.0 + 0.0) / 2)  # b, c
    assert _value(m, "duration:<=5s", "recall")["value"] == pytest.approx(100 * (2 / 3 + 1 + 1) / 3)  # a, b, e
    assert _value(m, "events in [4, 5]", "F1")["n"] == 1  # e
    # every bucket is lvcap's strict score of the bucket's clips
    sub = strict_verdicts().filter(pl.col("item_id").is_in(["c", "e"]))
    theirs = LVCAP.compute_metrics(sub, n_resamples=0).filter(pl.col("bucket") == "all")
    for row in theirs.iter_rows(named=True):
        assert _value(m, "source:DREAM/videvo", d1k_metrics.METRIC_NAMES[row["metric"]])["value"] == row["value"]


def test_strict_params_reach_lvcap():
    pooled = D1K.compute_metrics(strict_verdicts(), items=items(), n_resamples=0, event_average="pooled")
    assert set(pooled["mode"]) == {"strict/pooled"}
    assert _value(pooled, "all", "recall")["value"] == pytest.approx(100 * 5 / 8)  # entailed / reference events
    assert _value(pooled, "all", "precision")["value"] == pytest.approx(100 * 2 / 4)
    paper = D1K.compute_metrics(strict_verdicts(), items=items(), n_resamples=0, paper_compatible=True)
    assert set(paper["mode"]) == {"paper"}
    # as the official code drops a clip whose judgment failed: c (one unjudged event) leaves both averages
    assert _value(paper, "all", "recall")["value"] == pytest.approx(100 * (2 / 3 + 1 + 1) / 3)
    assert _value(paper, "all", "precision")["value"] == pytest.approx(100 * (1 / 2 + 0) / 2)


def test_no_rows_to_score_is_an_error():
    with pytest.raises(ValueError, match="no DREAM-1K rows"):
        D1K.compute_metrics(official_verdicts().filter(pl.col("step") == "extract"), items=items(), n_resamples=0)


# -- per clip --------------------------------------------------------------------------------------------------------
def test_clip_table_official():
    t = {r["item_id"]: r for r in d1k_metrics.clip_table(official_verdicts(), items()).iter_rows(named=True)}
    assert set(t) == set(CLIPS)
    assert (t["a"]["recall"], t["a"]["precision"]) == pytest.approx((2 / 3, 1 / 2))
    assert t["a"]["f1"] == pytest.approx(_f1(2 / 3, 1 / 2))
    assert (t["a"]["hits_r"], t["a"]["n_r"], t["a"]["source"], t["a"]["duration"], t["a"]["n_events"]) == \
        (2, 3, "DREAM/youtube", 4.2, 3)
    assert t["d"]["success"] is False and t["d"]["recall"] is None and t["d"]["n_no_verdict"] == 1
    assert t["e"]["f1"] is None  # 0/0
    assert {r["mode"] for r in t.values()} == {"official"}


def test_clip_table_strict():
    t = {r["item_id"]: r for r in d1k_metrics.clip_table(strict_verdicts(), items()).iter_rows(named=True)}
    assert (t["a"]["hits_r"], t["a"]["n_r"], t["a"]["hits_p"], t["a"]["n_p"]) == (2, 3, 1, 2)
    assert t["c"]["success"] is False and t["c"]["n_no_verdict"] == 1 and t["c"]["recall"] == 0.0
    assert t["e"]["precision"] is None and t["e"]["recall"] == 1.0
    assert {r["mode"] for r in t.values()} == {"strict"}


def test_clip_table_keeps_modes_and_cells_apart():
    """A run folder holds both modes' cells for the same clips and captions: each is its own row, labelled."""
    both = pl.concat([official_verdicts().with_columns(pl.lit("d-official").alias("protocol")),
                      strict_verdicts().with_columns(pl.lit("d-strict").alias("protocol"))], how="diagonal_relaxed")
    t = d1k_metrics.clip_table(both.with_columns(pl.lit("j").alias("judge")), items())
    assert t.columns[:2] == ["protocol", "judge"]
    assert t.group_by("protocol", "mode").len().sort("protocol").rows() == [("d-official", "official", 5),
                                                                            ("d-strict", "strict", 4)]
    a = t.filter((pl.col("item_id") == "a") & (pl.col("mode") == "official")).row(0, named=True)
    assert (a["hits_r"], a["n_r"]) == (2, 3)


# -- paired ------------------------------------------------------------------------------------------------------------
def _paired_values(spec, verdicts):
    v = verdicts.with_columns(pl.lit("all").alias("_task"))
    videos = sorted(set(v["video_id"]))
    sums = per_video_stats(v, spec, videos, ["all"]).sum(0)[0]
    return {k: float(f(sums)) for k, f in spec.metrics.items()}


def test_paired_official_is_the_clip_mean():
    values = _paired_values(paired_spec("official"), official_verdicts())
    r, p = (2 / 3 + 1 / 2 + 1 + 0) / 4, (1 / 2 + 1 + 1 / 4 + 0) / 4  # d Failed
    assert values["recall"] == pytest.approx(r) and values["precision"] == pytest.approx(p)
    assert values["F1"] == pytest.approx(_f1(r, p))


@pytest.mark.parametrize("mode", ["strict", "strict/pooled", "paper"])
def test_paired_strict_agrees_with_lvcaps(mode):
    ours = _paired_values(paired_spec(mode), strict_verdicts())
    theirs = _paired_values(LVCAP.paired_spec(mode), strict_verdicts())
    assert ours["F1"] == pytest.approx(theirs["S_e"]) or (math.isnan(ours["F1"]) and math.isnan(theirs["S_e"]))
    m = D1K.compute_metrics(strict_verdicts(), items=items(), n_resamples=0, mode="strict",
                            event_average="pooled" if mode.endswith("pooled") else "video",
                            paper_compatible=mode.startswith("paper"))
    assert 100 * ours["F1"] == pytest.approx(_value(m, "all", "F1")["value"])


@pytest.mark.parametrize("mode", ["official", "strict", "strict/pooled", "paper"])
def test_paired_stats_keep_the_rows_and_their_systems(mode):
    """capeval compare and the rank agreement across judges group the statistics by system: every verdict row comes
    back with its columns, and two systems in one frame keep their own values."""
    verdicts = official_verdicts() if mode == "official" else strict_verdicts()
    worse = '{"relationships": [], "hits": 0, "n_events": 2, "score": 0.0}' if mode == "official" else \
        '{"label": "neutral", "event": "x"}'
    other = verdicts.with_columns(pl.lit("other").alias("captioner"),
                                  pl.when(pl.col("verdict") >= 0).then(pl.lit(worse)).otherwise(pl.col("detail"))
                                  .alias("detail"))
    spec = paired_spec(mode)
    both = pl.concat([verdicts, other])
    stats = spec.stats(both.with_columns(pl.lit("all").alias("_task")), {})
    assert stats.height == both.height and set(both.columns) <= set(stats.columns)
    for name, alone in (("m", verdicts), ("other", other)):
        mine = stats.filter(pl.col("captioner") == name).drop(["_s0", "_s1", "_s2", "_s3", "_task"])
        assert _paired_values(spec, mine) == pytest.approx(_paired_values(spec, alone), nan_ok=True)
    assert _paired_values(spec, other)["recall"] == 0.0 < _paired_values(spec, verdicts)["recall"]
