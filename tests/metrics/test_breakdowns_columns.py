"""engine/metrics/breakdowns.py on small CapQuiz tables: which attributes exist (ITEMS columns, extra keys, derived
duration buckets and scene counts), an unknown one as an error listing them, each level scored exactly as the
protocol scores that level's verdicts alone, and columns the protocol already breaks down by left to it."""

from __future__ import annotations

import json

import polars as pl
import pytest

from capeval.engine.cli import main
from capeval.engine.metrics.breakdowns import (UnknownColumnError, available_columns, duration_bucket, level_order,
                                       with_breakdowns)
from capeval.engine.registry import lookup

CD, TP, FP = 0, 1, 2
# (video, duration s or None, scene, sub_category, verdict): five videos, two items each
ROWS = [("v1", 30.0, 1, "people", TP), ("v1", 30.0, 2, "people", FP),
        ("v2", 200.0, 1, "animals", TP), ("v2", 200.0, 1, "people", CD),
        ("v3", 700.0, 1, "animals", TP), ("v3", 700.0, 2, "animals", TP),
        ("v4", 1500.0, 3, "people", FP), ("v4", 1500.0, 1, "people", CD),
        ("v5", None, None, None, TP), ("v5", None, None, None, FP)]


def _items() -> pl.DataFrame:
    extra = [json.dumps({k: v for k, v in (("duration", d), ("scene", s), ("sub_category", c)) if v is not None})
             for _, d, s, c, _ in ROWS]
    return pl.DataFrame({"benchmark": "capquiz", "task": "mcq", "item_id": [f"q{i}" for i in range(len(ROWS))],
                         "video_id": [r[0] for r in ROWS], "category": ["Entity", "Action"] * 5, "extra": extra})


def _verdicts() -> pl.DataFrame:
    return pl.DataFrame(
        [dict(request_key=f"r{i}", protocol="capquiz", task="mcq", item_id=f"q{i}", video_id=r[0], captioner="m",
              prompt_id="p", frame_spec="f", judge="j", verdict=r[-1], parse_status=0) for i, r in enumerate(ROWS)],
        schema_overrides={"verdict": pl.Int8, "parse_status": pl.Int8})


def _compute(verdicts, items=None, captions=None):
    return lookup("protocol", "capquiz").compute_metrics(verdicts, items=items, captions=captions, n_resamples=30,
                                                         seed=5)


def _levels(frame: pl.DataFrame, column: str) -> dict[str, pl.DataFrame]:
    rows = frame.filter(pl.col("by") == column)
    return {level: rows.filter(pl.col(column) == level) for level in rows[column].unique().to_list()}


def _same_metrics(got: pl.DataFrame, expected: pl.DataFrame) -> None:
    assert got.select(expected.columns).equals(expected), (got.select(expected.columns), expected)


def test_available_columns_name_items_columns_extra_keys_and_derived_ones():
    names = available_columns(_items())
    assert {"task", "item_id", "video_id", "category"} <= set(names)
    assert {"extra.duration", "extra.scene", "extra.sub_category", "duration_bucket", "n_scenes"} <= set(names)
    assert "extra" not in names and "media_path" not in names  # the JSON itself; a column nobody fills
    assert available_columns(None, _verdicts()) == ["task", "item_id", "video_id"]  # no items: the verdicts'


def test_unknown_column_is_an_error_listing_the_available_ones():
    with pytest.raises(UnknownColumnError) as exc:
        with_breakdowns(_compute(_verdicts(), _items()), _compute, _verdicts(), ["sub_categroy"], items=_items())
    message = str(exc.value)
    assert "'sub_categroy'" in message and "available:" in message
    assert "category" in message and "extra.sub_category" in message and "duration_bucket" in message


def test_score_by_unknown_column_exits_2_naming_the_available_ones(tmp_path, capsys):
    verdicts, items = tmp_path / "v.parquet", tmp_path / "items.jsonl"
    _verdicts().write_parquet(verdicts)
    items.write_text("".join(json.dumps({**r, "media_type": "video"}) + "\n" for r in _items().to_dicts()))
    out = tmp_path / "m.csv"
    rc = main(["score", "--protocol", "capquiz", "--verdicts", str(verdicts), "--items", str(items),
               "--out", str(out), "--by", "nope", "--quiet"])
    assert rc == 2 and not out.exists()
    err = capsys.readouterr().err
    assert "--by: no item attribute 'nope'" in err and "extra.sub_category" in err
    rc = main(["score", "--protocol", "capquiz", "--verdicts", str(verdicts), "--items", str(items),
               "--out", str(out), "--by", "sub_category", "--resamples", "30", "--seed", "5"])
    assert rc == 0
    frame = pl.read_csv(out)
    assert set(frame.filter(pl.col("by") == "sub_category")["sub_category"]) == {"people", "animals", "unknown"}
    printed = capsys.readouterr().out
    assert "== capquiz by sub_category" in printed
    assert "fewer than 20 videos" in printed  # every level rests on 1-4 videos: the leaderboard's rule


def test_extra_key_levels_equal_the_protocol_on_each_levels_verdicts():
    items, verdicts = _items(), _verdicts()
    unsplit = _compute(verdicts, items)
    frame = with_breakdowns(unsplit, _compute, verdicts, ["sub_category"], items=items).frame
    assert frame.filter(pl.col("by") == "all").drop("by", "sub_category", "level_videos").equals(unsplit)
    levels = _levels(frame, "sub_category")
    assert set(levels) == {"people", "animals", "unknown"}  # v5's items have no sub_category
    for level, rows in levels.items():
        ids = [f"q{i}" for i, r in enumerate(ROWS) if (r[3] or "unknown") == level]
        own_v = verdicts.filter(pl.col("item_id").is_in(ids))
        _same_metrics(rows, _compute(own_v, items.filter(pl.col("item_id").is_in(ids))))
        assert set(rows["level_videos"]) == {own_v["video_id"].n_unique()}


def test_duration_bucket_from_extra_duration_and_probed_media(tmp_path):
    from capeval.engine.datasets.synthetic_videos import make_video
    from capeval.engine.frames.decode import probe_duration

    video = tmp_path / "v5.mp4"
    make_video(video, codec="libx264", seconds=1.0, fps=8, size=(64, 48), seed=1)
    items = _items().with_columns(pl.when(pl.col("video_id") == "v5").then(pl.lit(str(video)))
                                  .otherwise(pl.lit(None, dtype=pl.String)).alias("media_path"))
    verdicts = _verdicts()
    unsplit = _compute(verdicts, items)
    frame = with_breakdowns(unsplit, _compute, verdicts, ["duration_bucket"], items=items,
                            media_duration=probe_duration).frame
    levels = _levels(frame, "duration_bucket")
    # 30 s and the 1 s video: <2min; 200 s: 2-5min; 700 s: 11-15min; 1500 s: >20min (LVCap-Eval's edges)
    assert set(levels) == {"<2min", "2-5min", "11-15min", ">20min"}
    assert level_order(list(levels)) == ["<2min", "2-5min", "11-15min", ">20min"]
    bucket = {"v1": "<2min", "v5": "<2min", "v2": "2-5min", "v3": "11-15min", "v4": ">20min"}
    for level, rows in levels.items():
        videos = [v for v, b in bucket.items() if b == level]
        _same_metrics(rows, _compute(verdicts.filter(pl.col("video_id").is_in(videos)),
                                     items.filter(pl.col("video_id").is_in(videos))))
    # without a way to probe media, the video without extra.duration has no duration
    frame = with_breakdowns(unsplit, _compute, verdicts, ["duration_bucket"], items=items).frame
    assert set(_levels(frame, "duration_bucket")) == {"<2min", "2-5min", "11-15min", ">20min", "unknown"}
    # other edges, as LVCap's duration_buckets param gives them
    frame = with_breakdowns(unsplit, _compute, verdicts, ["duration_bucket"], items=items,
                            duration_buckets="1,10,30").frame
    assert set(_levels(frame, "duration_bucket")) == {"<1min", "1-10min", "11-30min", "unknown"}


def test_duration_bucket_labels_follow_the_paper():
    assert [duration_bucket(s) for s in (60, 120, 300, 301, 600, 900, 1200, 1201, None)] == [
        "<2min", "2-5min", "2-5min", "6-10min", "6-10min", "11-15min", "16-20min", ">20min", "unknown"]


def test_n_scenes_counts_each_videos_distinct_scenes():
    items, verdicts = _items(), _verdicts()
    frame = with_breakdowns(_compute(verdicts, items), _compute, verdicts, ["n_scenes"], items=items).frame
    levels = _levels(frame, "n_scenes")
    # v1: scenes 1, 2; v2: 1; v3: 1, 2; v4: 3, 1; v5: none
    assert set(levels) == {"1", "2", "unknown"}
    assert set(levels["2"]["level_videos"]) == {3} and set(levels["1"]["level_videos"]) == {1}
    _same_metrics(levels["1"], _compute(verdicts.filter(pl.col("video_id") == "v2"),
                                        items.filter(pl.col("video_id") == "v2")))


def test_a_column_the_protocol_already_breaks_down_by_is_left_to_it():
    vci = lookup("protocol", "vcinspector")
    verdicts = _verdicts().with_columns(pl.lit("vcinspector").alias("protocol"), pl.lit(3, dtype=pl.Int8)
                                        .alias("verdict"))
    items = _items()

    def compute(v, items=None, captions=None):
        return vci.compute_metrics(v, items=items, n_resamples=20, seed=0)

    unsplit = compute(verdicts, items)
    result = with_breakdowns(unsplit, compute, verdicts, ["category", "task"], items=items)
    assert result.notes == ["category: the protocol's metrics already break down by it (its own rows)"]
    assert set(result.frame["by"]) == {"all", "task"}
    assert result.frame.filter(pl.col("by") == "all").drop("by", "task", "level_videos").equals(unsplit)
