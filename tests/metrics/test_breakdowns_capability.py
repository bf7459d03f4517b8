"""Issue 18, done-when: `capeval score --by` on the CAPability release (three of its tasks, image and video, read in
place from ../shared/data/capability) with the released GPT-4-Turbo judgments gives per-category metrics whose
overall rows equal the unsplit run exactly, and whose rows for each category equal the protocol's metrics computed
here on that category's verdicts alone.

CAPability's annotations carry no `category` column (file_id, file_path, annotation, task, data_type): the category
they do carry is the media type (data_type -> ITEMS.media_type), image (static) or video (dynamic) dimensions, the
split of the paper's dimension table. Asking for `category` is an error that lists what they carry."""

from __future__ import annotations

import polars as pl
import pytest

from capeval.engine.cli import main
from capeval.engine.protocols.capability.release import RELEASED_JUDGE, load_items, load_judgments
from capeval.engine.registry import lookup

TASKS = ["OCR", "dynamic_object_number", "camera_movement"]  # one image task, two video tasks: fast, both media
MODEL = "gpt-4o-0806"
RESAMPLES = "40"
BY_COLUMNS = ["by", "media_type", "level_videos"]


@pytest.fixture(scope="module")
def release(shared_data, tmp_path_factory):
    """An annotations folder of links to three of the release's task files, and the released judgments of one
    captioning model as a VERDICTS Parquet."""
    root = tmp_path_factory.mktemp("capability")
    annotations = root / "annotations"
    annotations.mkdir()
    for task in TASKS:  # read in place: links, never copies
        (annotations / f"{task}.jsonl").symlink_to(shared_data / "capability" / "annotations" / f"{task}.jsonl")
    items = load_items(annotations, TASKS)
    loaded = load_judgments(shared_data / "capability" / "judgments" / MODEL, items, tasks=TASKS)
    assert set(loaded.verdicts.column("judge").to_pylist()) == {RELEASED_JUDGE}
    verdicts = root / "verdicts.parquet"
    pl.from_arrow(loaded.verdicts).write_parquet(verdicts)
    return annotations, verdicts, pl.from_arrow(items), pl.from_arrow(loaded.verdicts)


def _score(release, tmp_path, *extra) -> pl.DataFrame:
    annotations, verdicts, _, _ = release
    out = tmp_path / f"metrics{len(extra)}.csv"
    rc = main(["score", "--protocol", "capability", "--verdicts", str(verdicts), "--items", str(annotations),
               "--out", str(out), "--resamples", RESAMPLES, "--seed", "7", "--mode", "official", "--quiet", *extra])
    assert rc == 0
    return pl.read_csv(out, infer_schema_length=None)


def test_score_by_media_type_overall_equals_unsplit_and_levels_equal_their_own_metrics(release, tmp_path):
    _, _, items, verdicts = release
    unsplit = _score(release, tmp_path)
    split = _score(release, tmp_path, "--by", "media_type")
    assert set(split["by"]) == {"all", "media_type"}

    overall = split.filter(pl.col("by") == "all")
    assert set(overall["media_type"]) == {"all"}
    assert overall.drop(BY_COLUMNS).select(unsplit.columns).equals(unsplit), "overall rows differ from the unsplit run"
    assert set(overall["level_videos"]) == {verdicts["video_id"].n_unique()}

    # each category independently: its items and their verdict rows, through the protocol's own compute_metrics
    protocol = lookup("protocol", "capability")
    levels = split.filter(pl.col("by") == "media_type")
    assert set(levels["media_type"]) == {"image", "video"}
    for media_type in ("image", "video"):
        own_items = items.filter(pl.col("media_type") == media_type)
        own = verdicts.join(own_items.select("task", "item_id"), on=["task", "item_id"], how="semi")
        expected = protocol.compute_metrics(own, items=own_items, n_resamples=int(RESAMPLES), seed=7,
                                            mode="official")
        got = levels.filter(pl.col("media_type") == media_type)
        assert set(got["task"]) == set(own_items["task"]) | {"avg"}
        assert set(got["level_videos"]) == {own["video_id"].n_unique()}
        keys = ["task", "metric"]
        joined = expected.select(*keys, "value", "ci_low", "ci_high", "n", "n_no_verdict").join(
            got.select(*keys, "value", "ci_low", "ci_high", "n", "n_no_verdict"), on=keys, suffix="_cli")
        assert joined.height == expected.height == got.height
        for c in ("value", "ci_low", "ci_high", "n", "n_no_verdict"):
            assert joined[c].to_list() == joined[f"{c}_cli"].to_list(), (media_type, c)
    # the category split is a real one: image and video averages differ from each other and from the overall
    f1 = {m: levels.filter((pl.col("media_type") == m) & (pl.col("task") == "avg") & (pl.col("metric") == "f1"))
          ["value"][0] for m in ("image", "video")}
    assert f1["image"] != f1["video"]


def test_category_is_an_error_listing_what_the_annotations_carry(release, tmp_path, capsys):
    annotations, verdicts, _, _ = release
    rc = main(["score", "--protocol", "capability", "--verdicts", str(verdicts), "--items", str(annotations),
               "--out", str(tmp_path / "m.csv"), "--by", "category"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "'category'" in err and "null in every item" in err
    assert "available:" in err and "media_type" in err and "task" in err
    assert not (tmp_path / "m.csv").exists()


def test_judge_by_media_type_and_an_unknown_column_refused_before_judging(shared_data, tmp_path, capsys):
    """`capeval judge --by`: checked before any request is sent, then the breakdown rows in --metrics."""
    import json

    d = shared_data / "capability"
    folder = tmp_path / "release" / "annotations"
    folder.mkdir(parents=True)
    replies = []
    for task in ("scene", "action"):  # five image items, five video items
        lines = (d / "annotations" / f"{task}.jsonl").read_text().splitlines()[:5]
        (folder / f"{task}.jsonl").write_text("\n".join(lines) + "\n")
        replies += [{"item_id": json.loads(x)["file_id"], "step": "judge", "attempt": 0,
                     "text": '{"score": %d}' % (1 if i % 2 else -1)} for i, x in enumerate(lines)]
    (tmp_path / "replies.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies))
    base = ["judge", "--protocol", "capability", "--dataset", "capability", "--items", str(folder),
            "--captions", str(d / "captions" / "qwen2.5vl_7b"), "--judge", "replay",
            "--judge-option", f"replies={tmp_path / 'replies.jsonl'}", "--cache", str(tmp_path / "c"),
            "--resamples", "20", "--no-progress"]
    out, metrics = tmp_path / "v.parquet", tmp_path / "m.csv"
    assert main(base + ["--out", str(out), "--by", "nope"]) == 2
    assert "available:" in capsys.readouterr().err and not out.exists()  # nothing judged
    assert main(base + ["--out", str(out), "--metrics", str(metrics), "--by", "media_type"]) == 0
    assert "== capability by media_type" in capsys.readouterr().out
    m = pl.read_csv(metrics)
    unsplit = m.filter(pl.col("by") == "all")
    for media_type, task in (("image", "scene"), ("video", "action")):
        rows = m.filter((pl.col("by") == "media_type") & (pl.col("media_type") == media_type))
        assert set(rows["task"]) == {task, "avg"}
        mine = rows.filter(pl.col("task") == task).select("metric", "value", "n")
        assert mine.equals(unsplit.filter(pl.col("task") == task).select("metric", "value", "n"))
