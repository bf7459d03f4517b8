"""`capeval judge validate` hands a protocol's paired statistic the verdict rows WITHOUT `detail` (only task, item,
video, step, judge and the verdict code). dream1k's statistic must then read strict rows from their entailment codes
and leave an official clip's score undefined (its code says only that the list was judged), never crash and never
count it as 0."""

from __future__ import annotations

import polars as pl

from capeval.engine.protocols.dream1k.paired import paired_spec


def _strict_rows() -> pl.DataFrame:
    # video a: recall 1 of 2 entailed, precision 2 of 2; video b: recall 0 of 1, precision 1 of 1 (codes: 1 entailment)
    rows = [("a", "entail_r", 1), ("a", "entail_r", 0), ("a", "entail_p", 1), ("a", "entail_p", 1),
            ("b", "entail_r", 2), ("b", "entail_p", 1)]
    return pl.DataFrame({"video_id": [r[0] for r in rows], "item_id": [r[0] for r in rows],
                         "_task": ["events"] * len(rows), "step": [r[1] for r in rows],
                         "verdict": [r[2] for r in rows], "judge": ["j"] * len(rows)})


def _sums(frame: pl.DataFrame) -> list[float]:
    return [frame[c].sum() for c in ("_s0", "_s1", "_s2", "_s3")]


def test_strict_statistic_reads_entailment_codes_without_detail():
    spec = paired_spec("strict")
    out = spec.stats(_strict_rows(), {})
    precision_sum, precision_n, recall_sum, recall_n = _sums(out)
    # per video ratios averaged: precision (1 + 1) / 2 videos, recall (0.5 + 0) / 2 videos
    assert (precision_sum, precision_n) == (2.0, 2.0)
    assert (recall_sum, recall_n) == (0.5, 2.0)


def test_strict_statistic_with_detail_agrees_with_the_codes():
    rows = _strict_rows()
    label = {0: "neutral", 1: "entailment", 2: "contradiction"}
    with_detail = rows.with_columns(
        pl.col("verdict").map_elements(lambda c: f'{{"label": "{label[c]}"}}', return_dtype=pl.String).alias("detail"))
    spec = paired_spec("strict")
    assert _sums(spec.stats(with_detail, {})) == _sums(spec.stats(rows, {}))


def test_official_statistic_without_detail_counts_no_clip():
    rows = pl.DataFrame({"video_id": ["a", "a"], "item_id": ["a", "a"], "_task": ["events"] * 2,
                         "step": ["recall", "precision"], "verdict": [0, 0], "judge": ["j", "j"]})
    out = paired_spec("official").stats(rows, {})
    assert _sums(out) == [0.0, 0.0, 0.0, 0.0]  # no score known: the means are undefined, not 0
