"""CAPability loaders on the real release and on small bad files (errors must name file, line and field)."""

import json

import polars as pl
import pytest

from capeval.engine import schemas
from capeval.engine.protocols.capability.release import load_captions, load_items, load_judgments
from capeval.engine.datasets.jsonl import DatasetFormatError
from capeval.engine.protocols.capability.codes import TASKS, CapabilityVerdict


@pytest.fixture(scope="module")
def release(shared_data):
    root = shared_data / "capability"
    return root, load_items(root / "annotations")


def test_items_from_release(release):
    root, items = release
    assert items.schema.equals(schemas.ITEMS)
    raw = [json.loads(l) for t in TASKS for l in open(root / "annotations" / f"{t}.jsonl") if l.strip()]
    assert items.num_rows == len(raw) == 11631
    df = pl.from_arrow(items)
    assert df.select("task", "item_id").n_unique() == items.num_rows  # keyed by (task, file_id)
    assert df["video_id"].n_unique() == len({r["file_id"] for r in raw})
    don = df.filter(pl.col("task") == "dynamic_object_number").row(0, named=True)
    assert isinstance(json.loads(don["annotation"]), dict)


def test_captions_one_row_per_video(release):
    root, items = release
    caps = load_captions(root / "captions" / "gpt-4o-0806", items)
    assert caps.schema.equals(schemas.CAPTIONS)
    df = pl.from_arrow(caps)
    assert df["video_id"].n_unique() == df.height == pl.from_arrow(items)["video_id"].n_unique()
    assert set(df["prompt_id"]) == {"capability/image", "capability/video"}
    assert set(df["captioner"]) == {"gpt-4o-0806"} and set(df["frame_spec"]) == {"released"}
    ev = json.loads(open(root / "captions" / "gpt-4o-0806" / "event.jsonl").readline())
    assert df.filter(pl.col("video_id") == ev["file_id"])["text"][0] == ev["caption"]


def test_judgments_missing_rows_counted(release):
    root, items = release
    loaded = load_judgments(root / "judgments" / "llava_ov_7b_hf", items)
    v = pl.from_arrow(loaded.verdicts)
    judged = {t: {json.loads(l)["file_id"] for l in open(root / "judgments" / "llava_ov_7b_hf" / f"{t}.jsonl")}
              for t in ("camera_angle",)}
    n_items = pl.from_arrow(items).filter(pl.col("task") == "camera_angle").height
    ca = v.filter(pl.col("task") == "camera_angle")
    assert ca.filter(pl.col("verdict") == schemas.NO_VERDICT).height == n_items - len(judged["camera_angle"])
    assert (ca.filter(pl.col("verdict") == schemas.NO_VERDICT)["parse_status"] == schemas.ParseStatus.MISSING).all()
    counts = loaded.counts.filter(pl.col("task") == "camera_angle").row(0, named=True)
    assert counts["n_missing_items"] == n_items - len(judged["camera_angle"]) > 0
    don = v.filter(pl.col("task") == "dynamic_object_number")
    n_objects = sum(len(json.loads(a)) for a in pl.from_arrow(items).filter(
        pl.col("task") == "dynamic_object_number")["annotation"])
    assert don.height == n_objects and don["sub_index"].null_count() == 0


def _write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))
    return path


def _anno(fid, anno="cat", task="scene", dtype="image"):
    return {"file_id": fid, "file_path": f"data/{fid}.jpg", "annotation": anno, "task": task, "data_type": dtype}


@pytest.mark.parametrize("bad, line, needle", [
    ('{"file_id": "a", "file_path": "x", "annotation": "cat", "task": "scene", "data_type": "image"', 2,
     "malformed JSON"),
    ({"file_path": "x", "annotation": "cat", "task": "scene", "data_type": "image"}, 2, "'file_id': missing"),
    ({"file_id": 7, "file_path": "x", "annotation": "cat", "task": "scene", "data_type": "image"}, 2,
     "'file_id': expected string, got integer"),
    (_anno("s0", anno="dog"), 2, "duplicate file_id"),
    (_anno("s1", task="OCR"), 2, "'task'"),
    (_anno("s1", dtype="audio"), 2, "'data_type'"),
])
def test_bad_annotation_file_named(tmp_path, bad, line, needle):
    path = _write(tmp_path / "anno" / "scene.jsonl", [_anno("s0"), bad])
    with pytest.raises(DatasetFormatError) as err:
        load_items(tmp_path / "anno", tasks=["scene"])
    assert f"{path}:{line}:" in str(err.value) and needle in str(err.value)


def test_identical_duplicate_annotation_dropped_with_warning(tmp_path, capsys):
    _write(tmp_path / "anno" / "scene.jsonl", [_anno("s0"), _anno("s1"), _anno("s0")])
    items = load_items(tmp_path / "anno", tasks=["scene"])
    assert items.column("item_id").to_pylist() == ["s0", "s1"]
    assert "dropped 1 identical duplicate" in capsys.readouterr().err


def test_one_task_file_and_media_root(tmp_path):
    path = _write(tmp_path / "rel" / "annotations" / "scene.jsonl", [_anno("s0"), _anno("s1")])
    items = load_items(path, media_root=tmp_path / "rel")
    assert items.column("task").to_pylist() == ["scene", "scene"]
    assert items.column("media_path").to_pylist()[0] == str(tmp_path / "rel" / "data" / "s0.jpg")
    with pytest.raises(DatasetFormatError, match="not a CAPability task file"):
        load_items(_write(tmp_path / "other.jsonl", [_anno("s0")]))


def test_bad_judgments_named(tmp_path):
    _write(tmp_path / "anno" / "scene.jsonl", [_anno("s0"), _anno("s1")])
    items = load_items(tmp_path / "anno", tasks=["scene"])
    jpath = _write(tmp_path / "j" / "m" / "scene.jsonl", [{"file_id": "s0", "score": 1}, {"file_id": "s1", "score": 5}])
    with pytest.raises(DatasetFormatError, match=rf"{jpath}:2: field 'score': expected 1, 0 or -1"):
        load_judgments(tmp_path / "j" / "m", items)
    _write(jpath, [{"file_id": "s0", "score": 1}, {"file_id": "zz", "score": 1}])
    with pytest.raises(DatasetFormatError, match=rf"{jpath}:2: field 'file_id': 'zz' is not annotated"):
        load_judgments(tmp_path / "j" / "m", items)
    loaded = load_judgments(tmp_path / "j" / "m", items, on_unknown="count")
    assert loaded.counts.row(0, named=True)["n_unknown"] == 1


def test_duplicate_judgments_keep_last(tmp_path):
    _write(tmp_path / "anno" / "scene.jsonl", [_anno("s0"), _anno("s1")])
    items = load_items(tmp_path / "anno", tasks=["scene"])
    _write(tmp_path / "j" / "m" / "scene.jsonl",
           [{"file_id": "s0", "score": 1}, {"file_id": "s1", "score": 0}, {"file_id": "s0", "score": "-1"}])
    loaded = load_judgments(tmp_path / "j" / "m", items)
    v = dict(zip(loaded.verdicts.column("item_id").to_pylist(), loaded.verdicts.column("verdict").to_pylist()))
    assert v == {"s0": CapabilityVerdict.NEGATIVE, "s1": CapabilityVerdict.MISS}
    assert loaded.counts.row(0, named=True)["n_duplicates"] == 1
