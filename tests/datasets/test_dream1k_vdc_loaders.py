"""DREAM-1K and VDC loaders on the real files and on small bad files."""

import json

import polars as pl
import pytest

from engine import schemas
from engine.datasets import dream1k, vdc
from engine.datasets.jsonl import DatasetFormatError


def test_dream1k_clips_and_events(shared_data):
    path = shared_data / "dream1k" / "DREAM-1k.jsonl"
    raw = [json.loads(l) for l in open(path)]
    clips = dream1k.load_clips(path)
    events = dream1k.load_events(path)
    assert clips.schema.equals(schemas.ITEMS) and events.schema.equals(schemas.ITEMS)
    assert clips.num_rows == len(raw)
    assert events.num_rows == sum(len(r["extra_info"]["events"]) for r in raw)
    first = clips.slice(0, 1).to_pylist()[0]
    assert json.loads(first["annotation"]) == raw[0]["extra_info"]["events"]
    assert json.loads(first["extra"])["duration"] == raw[0]["extra_info"]["duration"]
    assert pl.from_arrow(events)["item_id"].n_unique() == events.num_rows


def test_dream1k_bad_event_type(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"vid": 1, "messages": [], "extra_info": {"events": "one event"}}) + "\n")
    with pytest.raises(DatasetFormatError, match=rf"{path}:1: field 'events': expected array, got string"):
        dream1k.load_clips(path)


def test_vdc_questions(shared_data):
    root = shared_data / "vdc"
    q = pl.from_arrow(vdc.load_questions(root))
    expected = {k: sum(len(v) for l in open(root / f"{k}.jsonl") for v in json.loads(l).values()) for k in vdc.KINDS}
    assert dict(q.group_by("task").len().iter_rows()) == expected
    assert (q["category"] == q["task"]).all()
    assert q.select("task", "item_id").n_unique() == q.height  # repeated video ids keep all questions


def test_vdc_bad_question(tmp_path):
    for k in vdc.KINDS:
        (tmp_path / f"{k}.jsonl").write_text("")
    (tmp_path / "camera.jsonl").write_text(json.dumps({"v1": [{"question": "q?", "answer": "a"}]}) + "\n"
                                           + json.dumps({"v2": [{"answer": "a"}]}) + "\n")
    with pytest.raises(DatasetFormatError, match=r"camera.jsonl:2: field 'question': missing"):
        vdc.load_questions(tmp_path)
