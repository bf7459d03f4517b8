"""The official CAPability rules on small hand-built releases: expected values are worked out by hand below."""

import json

import polars as pl
import pytest

from capeval.engine.protocols.capability.release import load_items, load_judgments
from capeval.engine.protocols.capability.codes import CapabilityQAVerdict, CapabilityVerdict
from capeval.engine.protocols.capability.metrics import compute_metrics, know_but_cannot_tell


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _anno(task, fid, anno, dtype="image"):
    return {"file_id": fid, "file_path": f"data/{fid}", "annotation": anno, "task": task, "data_type": dtype}


@pytest.fixture
def hand_release(tmp_path):
    a, j = tmp_path / "annotations", tmp_path / "judgments" / "toy"
    _write(a / "scene.jsonl", [_anno("scene", f"s{i}", "park") for i in range(5)])
    # s3 is judged twice: the last (-1) wins; s4 has no judgment.
    _write(j / "scene.jsonl", [{"file_id": "s0", "score": 1}, {"file_id": "s1", "score": 0},
                               {"file_id": "s2", "score": -1}, {"file_id": "s3", "score": 1},
                               {"file_id": "s3", "score": -1}])
    _write(a / "camera_angle.jsonl", [_anno("camera_angle", "c0", "level angle"),
                                      _anno("camera_angle", "c1", "high angle"),
                                      _anno("camera_angle", "c2", "low angle")])
    _write(j / "camera_angle.jsonl", [{"file_id": "c0", "pred": ["level angle", "high angle"]},
                                      {"file_id": "c1", "pred": ["N/A"]}, {"file_id": "c2", "pred": ["high angle"]}])
    _write(a / "dynamic_object_number.jsonl", [_anno("dynamic_object_number", "d0", {"table": 4, "chair": 2}, "video"),
                                               _anno("dynamic_object_number", "d1", {"sofa": 2}, "video")])
    _write(j / "dynamic_object_number.jsonl", [{"file_id": "d0", "response": [{"score": 1}, {"score": 0}]},
                                               {"file_id": "d1", "response": [{"score": -1}]}])
    # action reuses event ids; -1 ("not mentioned") is still a hit, a wrong one.
    _write(a / "action.jsonl", [_anno("action", f"event_{i}", "runs", "video") for i in range(3)])
    _write(j / "action.jsonl", [{"file_id": "event_0", "score": -1}, {"file_id": "event_1", "score": 0},
                                {"file_id": "event_2", "score": 1}])
    tasks = ["scene", "camera_angle", "dynamic_object_number", "action"]
    items = load_items(a, tasks=tasks)
    return items, load_judgments(j, items)


def _values(frame):
    return {(r["task"], r["metric"]): r["value"] / 100 for r in frame.iter_rows(named=True)}


def test_official_rules_by_hand(hand_release):
    items, loaded = hand_release
    assert loaded.counts.filter(pl.col("task") == "scene").row(0, named=True)["n_duplicates"] == 1
    m = compute_metrics(loaded.verdicts, items=items, n_resamples=0, mode="official")
    v = _values(m)
    # scene: pos s0, miss s1, neg s2 s3 (last duplicate), s4 missing -> left out: all = 4
    assert v["scene", "precision"] == pytest.approx(1 / 3)
    assert v["scene", "recall"] == pytest.approx(1 / 4)
    assert v["scene", "hit_rate"] == pytest.approx(3 / 4)
    assert v["scene", "f1"] == pytest.approx(2 / 7)
    scene = m.filter((pl.col("task") == "scene") & (pl.col("metric") == "recall")).row(0, named=True)
    assert (scene["n"], scene["n_no_verdict"], scene["n_missing"]) == (4, 1, 1)
    # camera_angle: c0 annotation in the list -> pos; ["N/A"] -> miss; c2 -> neg
    assert (v["camera_angle", "precision"], v["camera_angle", "recall"]) == pytest.approx((1 / 2, 1 / 3))
    assert v["camera_angle", "f1"] == pytest.approx(2 / 5)
    # dynamic_object_number: one verdict per object: 1, 0, -1
    assert (v["dynamic_object_number", "precision"], v["dynamic_object_number", "hit_rate"]) == pytest.approx((1 / 2, 2 / 3))
    assert m.filter(pl.col("task") == "dynamic_object_number")["n"][0] == 3
    # action: -1, 0, 1 -> one wrong hit, one miss, one correct
    assert (v["action", "precision"], v["action", "recall"], v["action", "hit_rate"]) == pytest.approx((1 / 2, 1 / 3, 2 / 3))
    # avg: unweighted mean over the four tasks
    assert v["avg", "precision"] == pytest.approx((1 / 3 + 1 / 2 + 1 / 2 + 1 / 2) / 4)
    assert v["avg", "f1"] == pytest.approx((2 / 7 + 2 / 5 + 2 / 5 + 2 / 5) / 4)
    assert set(m["mode"]) == {"official"}


def test_strict_mode_counts_missing_as_miss(hand_release):
    items, loaded = hand_release
    v = _values(compute_metrics(loaded.verdicts, items=items, n_resamples=0, mode="strict"))
    assert v["scene", "precision"] == pytest.approx(1 / 3)
    assert v["scene", "recall"] == pytest.approx(1 / 5)
    assert v["scene", "hit_rate"] == pytest.approx(3 / 5)
    assert v["scene", "f1"] == pytest.approx(1 / 4)
    assert v["action", "recall"] == pytest.approx(1 / 3)  # nothing missing there


def test_items_without_any_verdict_row_are_added(hand_release):
    items, loaded = hand_release
    judged = pl.from_arrow(loaded.verdicts).filter(pl.col("verdict") >= 0)  # drop the loader's MISSING rows
    m = compute_metrics(judged, items=items, n_resamples=0, mode="strict")
    row = m.filter((pl.col("task") == "scene") & (pl.col("metric") == "recall")).row(0, named=True)
    assert row["value"] == pytest.approx(100 / 5) and row["n_missing"] == 1
    without = compute_metrics(judged, n_resamples=0, mode="strict")
    assert _values(without)["scene", "recall"] == pytest.approx(1 / 4)  # no items: nothing known to be missing


def _verdicts(rows, captioner="toy"):
    return pl.DataFrame([{"task": t, "item_id": i, "video_id": i, "captioner": captioner, "sub_index": None,
                          "verdict": int(c), "parse_status": 0} for t, i, c in rows],
                        schema_overrides={"sub_index": pl.Int32, "verdict": pl.Int8, "parse_status": pl.Int8})


def test_know_but_cannot_tell_by_hand():
    qa = _verdicts([("scene", "s0", CapabilityQAVerdict.CORRECT), ("scene", "s1", CapabilityQAVerdict.CORRECT),
                    ("scene", "s2", CapabilityQAVerdict.WRONG), ("scene", "s3", CapabilityQAVerdict.CORRECT),
                    ("scene", "s4", CapabilityQAVerdict.CORRECT), ("OCR", "o0", CapabilityQAVerdict.CORRECT)])
    cap = _verdicts([("scene", "s0", CapabilityVerdict.POSITIVE), ("scene", "s1", CapabilityVerdict.MISS),
                     ("scene", "s2", CapabilityVerdict.NEGATIVE), ("scene", "s4", CapabilityVerdict.NEGATIVE),
                     ("OCR", "o0", CapabilityVerdict.POSITIVE)])
    kt = know_but_cannot_tell(qa, cap, n_resamples=0, mode="official")
    v = _values(kt)
    # correct QA on scene: s0 told (pos), s1 miss, s4 negative, s3 no caption verdict -> 2 of 3
    assert v["scene", "kt"] == pytest.approx(2 / 3)
    assert kt.filter(pl.col("task") == "scene")["n_no_verdict"][0] == 1
    assert v["OCR", "kt"] == pytest.approx(0.0)
    assert v["avg", "kt"] == pytest.approx((2 / 3 + 0) / 2)
    assert _values(know_but_cannot_tell(qa, cap, n_resamples=0, mode="strict"))["scene", "kt"] == pytest.approx(3 / 4)
