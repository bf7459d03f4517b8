"""Items, captions and verdicts from the files people have (JSONL, CSV, Parquet), checked before any work, and
`capeval judge` / `capeval score` on them, including CAPability's released captions as they are (issue 9 done-when
1, issue 8 finding 4)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from capeval.engine.cli import main
from capeval.engine.errors import UsageError
from capeval.engine.exitcodes import USAGE
from capeval.engine.inputs import check_verdicts, read_captions, read_items, read_verdicts

ROWS = [
    {"item_id": "q1", "video_id": "v1", "task": "color", "question": "What colour is the car?",
     "options": ["red", "blue"], "answer": "red", "category": "object", "source": "mine"},
    {"item_id": "q2", "video_id": "v1", "task": "count", "question": "How many cars?", "options": ["1", "2"],
     "answer": "2", "category": "count"},
    {"item_id": "q3", "media_path": "clips/v2.mp4", "task": "color", "annotation": {"car": "blue"}},
]


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_items_same_from_jsonl_csv_and_parquet(tmp_path):
    a = read_items(_jsonl(tmp_path / "items.jsonl", ROWS), benchmark="capquiz")
    pl.DataFrame([{**r, "options": json.dumps(r.get("options")) if r.get("options") else None,
                   "annotation": json.dumps(r["annotation"]) if "annotation" in r else None} for r in ROWS]) \
        .write_csv(tmp_path / "items.csv")
    b = read_items(tmp_path / "items.csv", benchmark="capquiz")
    keys = list(dict.fromkeys(k for r in ROWS for k in r))  # from_pylist takes its columns from the first row
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in keys} | {"annotation": json.dumps(r["annotation"])
                                          if "annotation" in r else None} for r in ROWS]), tmp_path / "items.parquet")
    c = read_items(tmp_path / "items.parquet", benchmark="capquiz")
    for t in (a, b, c):
        rows = t.to_pylist()
        assert [r["item_id"] for r in rows] == ["q1", "q2", "q3"]
        assert rows[0]["annotation"] == "What colour is the car?" and rows[0]["options"] == ["red", "blue"]
        assert json.loads(rows[2]["annotation"]) == {"car": "blue"}
        # video_id defaults to the media path as written; the path itself resolves against the file's folder
        assert rows[2]["video_id"] == "clips/v2.mp4" and rows[2]["media_path"] == str(tmp_path / "clips" / "v2.mp4")
        assert rows[2]["media_type"] == "video" and rows[0]["benchmark"] == "capquiz"
    assert json.loads(a.to_pylist()[0]["extra"]) == {"source": "mine"}  # unknown columns are kept, not lost


@pytest.mark.parametrize("rows, needle", [
    ([ROWS[0], {**ROWS[0], "answer": "blue"}], r"duplicate item ids with different content .*color/q1 \(rows 1 and 2\)"),
    ([{**ROWS[0], "options": 5}], r"row 1, column 'options': expected an array of texts"),
    ([{**ROWS[0], "video_id": 3.5}], r"row 1, column 'video_id': expected an id .* 3.5"),
    ([{**ROWS[0], "item_id": ""}], r"row 1, column 'item_id': empty or NaN"),
    ([{"task": "x", "question": "q?"}], r"row 1, column 'video_id': every item needs video_id or media_path"),
    ([{**ROWS[0], "media_type": "audio"}], r"column 'media_type': expected 'image' or 'video'"),
    ([{"video_id": "v", "question": "a?"}, {"video_id": "v", "question": "b?"}], r"has several items .* add item_id"),
])
def test_bad_item_tables_name_file_row_and_column(tmp_path, rows, needle):
    path = _jsonl(tmp_path / "items.jsonl", rows)
    with pytest.raises(UsageError, match=needle) as info:
        read_items(path)
    assert str(path) in str(info.value)


def test_identical_duplicates_dropped_with_warning(tmp_path, capsys):
    items = read_items(_jsonl(tmp_path / "i.jsonl", [ROWS[0], ROWS[1], ROWS[0]]))
    assert items.num_rows == 2 and "dropped 1 identical duplicate item row" in capsys.readouterr().err
    caps = read_captions(_jsonl(tmp_path / "c.jsonl", [{"video_id": "v1", "caption": "x"}] * 2))
    assert caps.num_rows == 1 and "dropped 1 identical duplicate caption row" in capsys.readouterr().err


def test_integer_video_ids_match_text_ids(tmp_path):
    pq.write_table(pa.table({"item_id": ["a", "b"], "video_id": pa.array([17, 18], pa.int64()),
                             "question": ["q?", "r?"]}), tmp_path / "items.parquet")
    items = read_items(tmp_path / "items.parquet")
    assert items.column("video_id").to_pylist() == ["17", "18"]
    caps = read_captions(_jsonl(tmp_path / "c.jsonl", [{"video_id": 17, "caption": "x"},
                                                       {"video_id": 18.0, "caption": "y"}]))
    assert caps.column("video_id").to_pylist() == ["17", "18"]


@pytest.mark.parametrize("write, needle", [
    (lambda p: p.with_suffix(".csv").write_text("video_id,caption\nv1,hello\nv2,\n"), r"row 3, column 'caption': (empty|missing)"),
    (lambda p: p.write_text('{"video_id": "v1", "caption": NaN}\n'), r"row 1, column 'caption': NaN value"),
    (lambda p: p.write_text('{"video_id": "v1", "caption": ["a"]}\n'), r"row 1, column 'caption': expected text, got list"),
    (lambda p: p.write_text('{"video_id": "v1", "text": "a", "n_tokens": "many"}\n'), r"column 'n_tokens': expected an integer"),
    (lambda p: p.write_text('{"video_id": "v1", "caption": "a"}\n{"video_id": "v1", "caption": "b"}\n'),
     r"duplicate caption ids with different content .*v1 \(rows 1 and 2\)"),
    (lambda p: p.write_text('{"vid": "v1", "caption": "a"}\n'), r"needs video_id or item_id"),
    (lambda p: p.write_text('{"video_id": "v1", "caption": "a"\n'), r":1: malformed JSON"),
])
def test_bad_caption_tables(tmp_path, write, needle):
    path = tmp_path / "caps.jsonl"
    write(path)
    target = path.with_suffix(".csv") if path.with_suffix(".csv").exists() else path
    with pytest.raises(UsageError, match=needle):
        read_captions(target)


@pytest.mark.parametrize("cell", ["NaN", "nan", " NAN "])
def test_nan_caption_cell_in_csv_is_missing_not_text(tmp_path, cell):
    """docs/inputs.md: a NaN caption is an error, never judged as the text "nan" (issue 19 item 13)."""
    path = tmp_path / "caps.csv"
    path.write_text(f"video_id,caption\nv1,hello\nv2,{cell}\n")
    with pytest.raises(UsageError, match=r"row 3, column 'caption': NaN value"):
        read_captions(path)
    path.write_text(f"video_id,caption,error\nv1,hello,\nv2,{cell},captioner timed out\n")  # a failed caption
    assert read_captions(path).column("text").to_pylist() == ["hello", None]


def test_csv_and_jsonl_with_a_byte_order_mark(tmp_path):
    """Excel and Notepad write a UTF-8 BOM; it is not part of the first column's name (issue 19 item 13)."""
    (tmp_path / "caps.csv").write_bytes("\ufeffvideo_id,caption\nv1,a red ball\n".encode())
    assert read_captions(tmp_path / "caps.csv").column("video_id").to_pylist() == ["v1"]
    (tmp_path / "items.jsonl").write_bytes("\ufeff".encode() + json.dumps(ROWS[0]).encode() + b"\n")
    assert read_items(tmp_path / "items.jsonl").column("item_id").to_pylist() == ["q1"]


def test_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "caps.csv"
    path.write_bytes(b"video_id,caption\nv1,hello\nv2,caf\xe9 au lait\n")
    with pytest.raises(UsageError, match=r"caps.csv:3: not UTF-8 text \(byte 0xe9 at byte 7 of the line\)"):
        read_captions(path)


def test_not_utf8_verdict_table_names_file_and_line(tmp_path):
    path = tmp_path / "v.csv"
    path.write_bytes(b"item_id,video_id,verdict,note\nq1,v1,1,ok\nq2,v2,0,caf\xe9\n")
    with pytest.raises(UsageError, match=r"v.csv:3: not UTF-8 text"):
        read_verdicts(path)


def test_duplicate_ids_with_escape_sequences_are_shown_escaped(tmp_path):
    path = _jsonl(tmp_path / "c.jsonl", [{"video_id": "v\x1b[2J", "caption": "a"},
                                         {"video_id": "v\x1b[2J", "caption": "b"}])
    with pytest.raises(UsageError) as info:
        read_captions(path)
    assert "\x1b" not in str(info.value) and "v\\x1b[2J (rows 1 and 2)" in str(info.value)


def test_nan_caption_in_parquet(tmp_path):
    pq.write_table(pa.table({"video_id": ["a", "b"], "caption": pa.array([1.5, math.nan])}), tmp_path / "c.parquet")
    with pytest.raises(UsageError, match=r"row 2, column 'caption': NaN value"):
        read_captions(tmp_path / "c.parquet")


def test_verdict_tables_checked(tmp_path):
    base = pl.DataFrame({"item_id": ["a", "b", "c"], "video_id": ["v", "v", "w"], "task": ["t"] * 3,
                         "verdict": [1.0, 0.0, -1.0]})
    ok = check_verdicts(base)
    assert ok["verdict"].dtype == pl.Int8 and ok["verdict"].to_list() == [1, 0, -1]
    with pytest.raises(UsageError, match=r"not integer codes .* row\(s\) \[2\]"):
        check_verdicts(base.with_columns(pl.Series("verdict", [1.0, 0.5, 1.0])))
    with pytest.raises(UsageError, match=r"not integer codes .* row\(s\) \[3\]"):
        check_verdicts(base.with_columns(pl.Series("verdict", [1.0, 0.0, math.nan])))
    doubled = pl.concat([base, base])
    doubled.write_parquet(tmp_path / "v.parquet")
    with pytest.raises(UsageError, match=r"6 duplicate verdict rows .*a rows \[1, 4\]"):
        read_verdicts(tmp_path / "v.parquet")
    with pytest.raises(UsageError, match="column 'verdict' must hold integer codes"):
        check_verdicts(base.with_columns(pl.lit("yes").alias("verdict")))


# --- the commands ------------------------------------------------------------------------------------------------

def test_judge_capability_release_in_one_command(tmp_path, shared_data, capsys):
    """CAPability's released captions of one model, as released, give metrics in one command (issue 9 (1))."""
    d = shared_data / "capability"
    out, metrics = tmp_path / "v.parquet", tmp_path / "m.csv"
    argv = ["judge", "--protocol", "capability", "--items", str(d / "annotations" / "camera_angle.jsonl"),
            "--captions", str(d / "captions" / "gpt-4o-0806" / "camera_angle.jsonl"), "--judge", "local",
            "--cache", str(tmp_path / "cache"), "--out", str(out), "--metrics", str(metrics), "--limit", "40",
            "--resamples", "50", "--no-progress"]
    assert main(argv) == 0
    v = pl.read_parquet(out)
    assert v.height == 40 and v["item_id"].n_unique() == 40 and set(v["captioner"]) == {"gpt-4o-0806"}
    assert set(v["prompt_id"]) == {"capability/image"}
    m = pl.read_csv(metrics)
    row = m.filter((pl.col("task") == "camera_angle") & (pl.col("metric") == "hit_rate"))
    assert row.height == 1 and row["n"][0] == 40 and 0 <= row["value"][0] <= 100
    assert "precision" in capsys.readouterr().out
    assert main(argv) == 0  # a second run sends nothing: the cache answers
    assert "sent 0" in capsys.readouterr().out


def test_judge_with_replay_judge_and_the_release_folder(tmp_path, shared_data):
    """--dataset capability on the annotations folder, captions folder of one model, replayed replies."""
    d = shared_data / "capability"
    scene = [json.loads(x) for x in (d / "annotations" / "scene.jsonl").read_text().splitlines()[:5]]
    replies = _jsonl(tmp_path / "replies.jsonl", [{"item_id": r["file_id"], "step": "judge", "attempt": 0,
                                                   "text": '{"score": 1}'} for r in scene])
    items = tmp_path / "rel" / "annotations"
    items.mkdir(parents=True)
    _jsonl(items / "scene.jsonl", scene)
    out = tmp_path / "v.parquet"
    rc = main(["judge", "--protocol", "capability", "--dataset", "capability", "--items", str(items),
               "--captions", str(d / "captions" / "qwen2.5vl_7b"), "--judge", "replay",
               "--judge-option", f"replies={replies}", "--cache", str(tmp_path / "c"), "--out", str(out),
               "--resamples", "0", "--no-progress"])
    assert rc == 0
    v = pl.read_parquet(out)
    assert v.height == 5 and set(v["verdict"].to_list()) == {1} and set(v["captioner"]) == {"qwen2.5vl_7b"}


def test_judge_refuses_bad_inputs_before_judging(tmp_path, shared_data, capsys):
    d = shared_data / "capability"
    base = ["judge", "--protocol", "capability", "--items", str(d / "annotations" / "scene.jsonl"),
            "--captions", str(d / "captions" / "gpt-4o-0806" / "scene.jsonl"), "--judge", "local",
            "--cache", str(tmp_path / "cache"), "--no-progress"]
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    assert main(base + ["--out", str(blocker / "v.parquet")]) == USAGE
    assert "cannot be written" in capsys.readouterr().err and not (tmp_path / "cache").exists()
    assert main(base + ["--out", str(tmp_path / "v.parquet"), "--param", "judge_frames=bogus:3"]) == USAGE
    assert "judge_frames" in capsys.readouterr().err
    assert main(base + ["--out", str(tmp_path / "v.parquet"), "--prompts", str(tmp_path / "nope.toml")]) == USAGE
    bad = _jsonl(tmp_path / "caps.jsonl", [{"file_id": "scene_0", "caption": None}])
    argv = base[:6] + [str(bad)] + base[7:] + ["--out", str(tmp_path / "v.parquet")]
    assert main(argv) == USAGE
    assert "row 1, column 'caption'" in capsys.readouterr().err
    ids = _jsonl(tmp_path / "ids.jsonl", [{"video_id": 1, "caption": "x"}])  # matches no CAPability item
    assert main(base[:6] + [str(ids)] + base[7:] + ["--out", str(tmp_path / "v.parquet")]) == USAGE
    assert "no (item, caption) pair matched" in capsys.readouterr().err
    assert not (tmp_path / "v.parquet").exists()


def test_score_checks_verdicts_and_takes_protocol_options(tmp_path, shared_data, capsys):
    d = shared_data / "capability"
    out = tmp_path / "v.parquet"
    assert main(["judge", "--protocol", "capability", "--items", str(d / "annotations" / "OCR.jsonl"),
                 "--captions", str(d / "captions" / "gpt-4o-0806" / "OCR.jsonl"), "--judge", "local",
                 "--cache", str(tmp_path / "c"), "--out", str(out), "--limit", "20", "--resamples", "0",
                 "--no-progress"]) == 0
    strict = tmp_path / "s.csv"
    assert main(["score", "--protocol", "capability", "--verdicts", str(out), "--out", str(strict),
                 "--mode", "strict", "--resamples", "0", "--quiet"]) == 0
    assert set(pl.read_csv(strict)["mode"]) == {"strict"}
    v = pl.read_parquet(out)
    pl.concat([v, v]).write_parquet(tmp_path / "twice.parquet")
    assert main(["score", "--protocol", "capability", "--verdicts", str(tmp_path / "twice.parquet"),
                 "--out", str(tmp_path / "t.csv"), "--quiet"]) == USAGE
    assert "duplicate verdict rows" in capsys.readouterr().err
    v.with_columns(pl.col("verdict").cast(pl.Float64)).write_parquet(tmp_path / "float.parquet")
    assert main(["score", "--protocol", "capability", "--verdicts", str(tmp_path / "float.parquet"),
                 "--out", str(tmp_path / "f.csv"), "--resamples", "0", "--quiet"]) == 0
    assert main(["score", "--protocol", "capability", "--verdicts", str(out), "--out", str(tmp_path / "o.csv"),
                 "--resamples", "0", "--quiet"]) == 0
    assert pl.read_csv(tmp_path / "f.csv").equals(pl.read_csv(tmp_path / "o.csv"))  # cast, same metrics


def test_judge_vcinspector_decodes_judge_frames_from_media(tmp_path, capsys):
    from capeval.engine.frames import shards as frame_shards

    """A reference-free multimodal protocol on a CSV of a video and an image: the judge gets frames decoded with
    the protocol's judge_frames spec (linspace:32 by default; an image is its one frame)."""
    import numpy as np
    from PIL import Image

    from capeval.engine.datasets.synthetic_videos import make_video

    make_video(tmp_path / "m" / "a.mp4", codec="libx264", seconds=2.0, fps=8, size=(64, 48), seed=1)
    Image.fromarray(np.full((40, 50, 3), 90, np.uint8)).save(tmp_path / "m" / "b.png")
    (tmp_path / "items.csv").write_text("video_id,media_path\na,m/a.mp4\nb,m/b.png\n")
    caps = _jsonl(tmp_path / "caps.jsonl", [{"video_id": "a", "caption": "a ball moves"},
                                            {"video_id": "b", "caption": "a grey picture"}])
    argv = ["judge", "--protocol", "vcinspector", "--items", str(tmp_path / "items.csv"), "--captions", str(caps),
            "--judge", "local", "--cache", str(tmp_path / "c"), "--out", str(tmp_path / "v.parquet"),
            "--param", 'judge_frames="linspace:6"', "--resamples", "0", "--no-progress"]
    assert main(argv) == 0
    assert "decoding linspace:6 from 2 videos/images" in capsys.readouterr().err
    v = pl.read_parquet(tmp_path / "v.parquet")
    assert v.height == 2 and v["verdict"].to_list() != [-1, -1] and set(v["parse_status"].to_list()) <= {0, 1}
    shapes = sorted(e.meta["shape"][0] for e in frame_shards.entries(tmp_path / "c" / "frames").values())
    assert shapes == [1, 6]
    (tmp_path / "m" / "b.png").unlink()
    assert main(argv) == USAGE
    assert "1 of 2 media files not found" in capsys.readouterr().err


def test_a_release_annotation_file_given_as_items_names_the_kind_its_protocol_declares(tmp_path):
    """read_items names no benchmark itself: the dataset kind in its message comes from the protocols'
    release_dataset_kind hook; a file no protocol claims gets the generic hint."""
    release = tmp_path / "OCR.jsonl"
    release.write_text(json.dumps({"file_id": "a", "file_path": "a.jpg", "data_type": "image", "annotation": {}}) + "\n")
    with pytest.raises(UsageError, match="this is a capability release annotation file; use --dataset capability"):
        read_items(release)
    unclaimed = tmp_path / "other.jsonl"
    unclaimed.write_text(json.dumps({"file_id": "a", "data_type": "image"}) + "\n")
    with pytest.raises(UsageError, match="read it with --dataset KIND, the benchmark's dataset kind"):
        read_items(unclaimed)


def test_a_caption_check_reads_the_same_table_without_keys(tmp_path):
    """The sweep check reads a captions file only to refuse what the run would refuse: keys=False skips hashing
    every caption and reads the rest alike."""
    from capeval.engine.inputs import read_captions

    path = tmp_path / "caps.jsonl"
    path.write_text("".join(json.dumps({"video_id": f"v{i}", "caption": f"caption {i}"}) + "\n" for i in range(5)))
    keyed, unkeyed = read_captions(path), read_captions(path, keys=False)
    assert all(keyed.column("caption_key").to_pylist()) and set(unkeyed.column("caption_key").to_pylist()) == {""}
    assert keyed.drop_columns(["caption_key"]).equals(unkeyed.drop_columns(["caption_key"]))


def test_items_read_a_batch_at_a_time_are_the_items_read_whole(tmp_path, monkeypatch, capsys):
    """read_items makes its rows into Arrow a few thousand at a time; duplicates and ids are judged over the whole
    file all the same: an identical duplicate in a later batch is dropped, a different one is an error naming both
    rows, several different items of a video without item_id are an error."""
    from capeval.engine.inputs import tables

    rows = [{"item_id": f"i{k}", "video_id": f"v{k % 3}", "annotation": f"q{k}", "options": ["a", "b"]}
            for k in range(7)]
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in rows + [rows[1]]))
    whole = read_items(good)
    assert "dropped 1 identical duplicate item row(s)" in capsys.readouterr().err
    monkeypatch.setattr(tables, "_BATCH_ROWS", 2)
    batched = read_items(good)
    assert "dropped 1 identical duplicate item row(s)" in capsys.readouterr().err
    assert batched.equals(whole) and batched.num_rows == 7
    clash = tmp_path / "clash.jsonl"
    clash.write_text("".join(json.dumps(r) + "\n" for r in rows + [{**rows[1], "annotation": "other"}]))
    with pytest.raises(UsageError, match=r"i1 \(rows 2 and 8\)"):
        read_items(clash)
    unnamed = tmp_path / "unnamed.jsonl"
    unnamed.write_text("".join(json.dumps({"video_id": "v", "annotation": f"q{k}"}) + "\n" for k in range(5)))
    with pytest.raises(UsageError, match=r"several items \(rows \[1, 2, 3, 4, 5\]\)"):
        read_items(unnamed)


def test_items_checked_for_duplicates_without_a_python_object_per_row(tmp_path, monkeypatch, capsys):
    """The duplicate check works on the table, not on a dict of every row's key: that dict (~45 MB at 100,000 items)
    stayed in the interpreter's arenas after the checks for the rest of a run (issue 30's scale RSS). With small
    batches, reading 20,000 items holds next to nothing in Python objects at any time; and the rows of a repeated
    key are still judged in file order (an identical one dropped, a different one an error naming both rows)."""
    import tracemalloc

    from capeval.engine.inputs import tables

    monkeypatch.setattr(tables, "_BATCH_ROWS", 64)
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"benchmark": "capquiz", "task": "scene", "item_id": f"v{k:06d}/scene",
                                        "video_id": f"v{k:06d}", "annotation": f"question {k}",
                                        "options": ["a", "b"], "answer": "a"}) + "\n" for k in range(20_000)))
    read_items(path)  # imports and first-call set-up outside the measure
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        items = read_items(path)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert items.num_rows == 20_000
    assert peak < 2_000_000, f"read_items held {peak / 1e6:.1f} MB of Python objects for 20,000 items"
    rows = [{"item_id": f"i{k}", "video_id": f"v{k}", "annotation": f"q{k}"} for k in range(200)]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows + [rows[70], {**rows[3], "annotation": "x"},
                                                                    rows[3], {**rows[150], "answer": "y"}]))
    with pytest.raises(UsageError, match=r"/i3 \(rows 4 and 202\); items/default/i150 \(rows 151 and 204\)$"):
        read_items(mixed)
    assert "dropped" not in capsys.readouterr().err  # an error: nothing is dropped, nothing warned


def test_items_are_one_contiguous_table_and_their_reading_batches_are_freed(tmp_path, monkeypatch):
    """read_items makes its rows into Arrow a batch at a time; the table it returns is one contiguous copy and the
    batches are gone: each batch's buffers were allocated between the garbage of reading the next rows, and pinned
    pages of Arrow's allocator it could not give back for the rest of a run (+22 MB at 100,000 items, issue 30's
    scale RSS). Arrow's pool then holds about the table and no more."""
    from capeval.engine.inputs import tables

    monkeypatch.setattr(tables, "_BATCH_ROWS", 64)
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps({"benchmark": "capquiz", "task": "scene", "item_id": f"v{k:06d}/scene",
                                        "video_id": f"v{k:06d}", "annotation": f"question {k} " * 4,
                                        "options": ["a", "b"], "answer": "a"}) + "\n" for k in range(20_000)))
    before = pa.total_allocated_bytes()
    items = read_items(path)
    held = pa.total_allocated_bytes() - before
    assert items.num_rows == 20_000
    assert all(column.num_chunks == 1 for column in items.columns)
    assert held <= 1.2 * items.nbytes + 65_536, f"Arrow holds {held} bytes for a table of {items.nbytes}"
