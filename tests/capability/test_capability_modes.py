"""CAPability official vs strict mode on hand-built replies and verdict tables (expected values worked out by hand),
the judging policy, the 0/0 notes, the official all-or-nothing rule for dynamic_object_number, and KT's join."""

from __future__ import annotations

import json

import polars as pl
import pytest

from capeval.engine.packs import builtin_pack_path, load_pack
from capeval.engine.protocols.capability import PROTOCOL
from capeval.engine.protocols.capability.codes import CapabilityQAVerdict, CapabilityVerdict as V
from capeval.engine.protocols.capability.metrics import compute_metrics, know_but_cannot_tell
from capeval.engine.protocols.capability.parsing import parse_official, parse_strict
from capeval.engine.protocols.capability.prompts import categories, use_structured
from capeval.engine.schemas import NO_VERDICT, ParseStatus

OWN = load_pack(builtin_pack_path("capability"))
ANGLE = {"annotation": "high angle", "names": list(categories(OWN, "camera_angle").names),
         "explains": list(categories(OWN, "camera_angle").explains)}
STYLE = {"annotation": "animated", "names": list(categories(OWN, "style").names),
         "explains": list(categories(OWN, "style").explains)}


def _both(task, text, ctx):
    return parse_official(task, text, ctx)[:2], parse_strict(task, text, ctx)[:2]


def test_classification_any_na_is_a_miss_officially_and_a_reask_in_strict():
    off, strict = _both("camera_angle", '{"pred": ["high angle", "N/A"], "reason": "x"}', ANGLE)
    assert off == (V.MISS, ParseStatus.OK)  # officially a miss, although the annotation is listed
    assert strict == (NO_VERDICT, ParseStatus.FAILED)  # contradictory: asked again, never a silent miss or hit
    for reply in ('{"pred": ["High angle"]}', '{"pred": ["overhead shot"]}', '{"pred": ["n/a"]}'):
        assert _both("camera_angle", reply, ANGLE) == ((NO_VERDICT, ParseStatus.FAILED),) * 2, reply  # exact names
    assert _both("camera_angle", '{"pred": [], "reason": "x"}', ANGLE)[0] == (V.NEGATIVE, ParseStatus.OK)


def test_name_with_explanation_rejected_for_camera_tasks_mapped_for_style():
    line = ANGLE["explains"][1]
    assert line.startswith("high angle:")
    assert _both("camera_angle", json.dumps({"pred": [line]}), ANGLE)[0][1] == ParseStatus.FAILED
    style_line = STYLE["explains"][1]
    assert style_line.startswith("animated:")
    assert _both("style", json.dumps({"pred": [style_line]}), STYLE) == ((V.POSITIVE, ParseStatus.OK),) * 2


def test_strict_reads_what_the_official_parser_cannot_but_validates_alike():
    ctx = {"annotation": "park"}
    prose = 'Sure. {"scene": "park", "score": -1, "reason": "a beach instead"} Hope this helps.'
    assert _both("scene", prose, ctx) == ((NO_VERDICT, ParseStatus.FAILED), (V.NEGATIVE, ParseStatus.REPAIRED))
    nulls = '{"scene": "park", "score": 0, "reason": null}'  # JSON null: not a Python literal
    assert _both("scene", nulls, ctx) == ((NO_VERDICT, ParseStatus.FAILED), (V.MISS, ParseStatus.REPAIRED))
    # a boolean score passes officially (True == 1) but is no score in strict mode
    assert _both("scene", "{'scene': 'park', 'score': True}", ctx) == ((V.POSITIVE, ParseStatus.OK),
                                                                      (NO_VERDICT, ParseStatus.FAILED))
    for bad in ('{"score": "+1"}', '{"score": 2}', '{"Score": 1}', '[{"score": 1}]', '{"score": 1},'):
        assert _both("scene", bad, ctx) == ((NO_VERDICT, ParseStatus.FAILED),) * 2, bad


def test_copied_field_rules_and_strict_match():
    ctx = {"annotation": {"hair": "golden"}}
    upper = '{"object_color": "{hair: GOLDEN}", "score": 1, "reason": "x"}'
    assert parse_official("object_color", upper, ctx)[:2] == (V.POSITIVE, ParseStatus.OK)
    assert parse_official("object_color", upper, {**ctx, "strict_match": True})[:2] == (NO_VERDICT, ParseStatus.FAILED)
    nocolon = '{"object_color": "hair golden", "score": 1, "reason": "x"}'
    assert _both("object_color", nocolon, ctx) == ((NO_VERDICT, ParseStatus.FAILED),) * 2
    num = {"annotation": {"table": 4}}
    as_dict = '{"object_number": {"table": "4"}, "score": 1, "reason": "x"}'
    assert parse_official("object_number", as_dict, num)[0] == V.POSITIVE
    assert parse_official("dynamic_object_number", as_dict, num)[:2] == (NO_VERDICT, ParseStatus.FAILED)  # eval.py:188


def test_policy_and_request_sampling_per_mode():
    off = PROTOCOL.judging_policy(mode="official", max_allow_missing="0")
    assert (off.max_reasks, off.reask_temperature, off.stop_when_failed_at_most) == (5, None, 0)
    strict = PROTOCOL.judging_policy()
    assert strict.mode == "strict" and strict.reask_temperature is not None and strict.stop_when_failed_at_most is None
    assert use_structured(None, "strict", "my-vllm-judge") and not use_structured(None, "strict", "gpt-4-turbo")
    assert not use_structured("true", "official", "x") and not use_structured("false", "strict", "x")


def _rows(rows, captioner="m"):
    return pl.DataFrame([{"task": t, "item_id": i, "video_id": i, "captioner": captioner, "sub_index": s,
                          "verdict": int(c), "parse_status": int(ParseStatus.FAILED if c == NO_VERDICT else 0)}
                         for t, i, s, c in rows],
                        schema_overrides={"sub_index": pl.Int32, "verdict": pl.Int8, "parse_status": pl.Int8})


def _value(frame, task, metric):
    return frame.filter((pl.col("task") == task) & (pl.col("metric") == metric)).row(0, named=True)


def test_dynamic_object_number_all_or_nothing_only_in_official_mode():
    d = "dynamic_object_number"
    v = _rows([(d, "a", 0, V.POSITIVE), (d, "a", 1, NO_VERDICT), (d, "b", 0, V.POSITIVE), (d, "b", 1, V.MISS)])
    off = _value(compute_metrics(v, n_resamples=0, mode="official"), d, "recall")
    # item a is not saved officially: its accepted object does not count either -> b alone: 1 of 2
    assert (off["value"], off["n"], off["n_no_verdict"], off["n_failed"]) == (50.0, 2, 2, 2)
    strict = _value(compute_metrics(v, n_resamples=0, mode="strict"), d, "recall")
    assert (strict["value"], strict["n"], strict["n_no_verdict"]) == (50.0, 4, 1)  # 2 of 4, the failed one a miss


def test_zero_over_zero_is_null_with_a_note_and_the_average_too():
    v = _rows([("scene", "s0", None, V.MISS), ("scene", "s1", None, V.MISS), ("OCR", "o0", None, V.POSITIVE)])
    m = compute_metrics(v, n_resamples=0, mode="official")
    p = _value(m, "scene", "precision")
    assert p["value"] is None and "0/0" in p["note"]
    assert _value(m, "scene", "recall")["value"] == 0.0 and _value(m, "scene", "recall")["note"] is None
    assert _value(m, "avg", "precision")["value"] is None and "undefined" in _value(m, "avg", "precision")["note"]
    assert _value(m, "avg", "recall")["value"] == pytest.approx(50.0)
    assert set(m["mode"]) == {"official"}


def _qa(rows, captioner="m"):
    return _rows([(t, i, s, c) for t, i, s, c in rows], captioner)


def test_kt_joins_by_item_and_says_when_model_labels_differ():
    qa = _qa([("scene", "s0", None, CapabilityQAVerdict.CORRECT), ("scene", "s1", None, CapabilityQAVerdict.CORRECT),
              ("scene", "s2", None, CapabilityQAVerdict.WRONG)], captioner="gpt-4o")
    cap = _rows([("scene", "s0", None, V.POSITIVE), ("scene", "s1", None, V.MISS), ("scene", "s2", None, V.MISS)],
                captioner="gpt-4o-0806")
    kt = know_but_cannot_tell(qa, cap, n_resamples=0)
    row = _value(kt, "scene", "kt")
    assert row["value"] == pytest.approx(50.0)  # s0 told, s1 not: not null, not 100%
    assert "labels differ" in row["note"] and "gpt-4o-0806" in row["note"]
    two = pl.concat([cap, cap.with_columns(pl.lit("other").alias("captioner"))])
    qa2 = pl.concat([qa, qa.with_columns(pl.lit("third").alias("captioner"))])
    with pytest.raises(ValueError, match="do not match"):
        know_but_cannot_tell(qa2, two, n_resamples=0)
    with pytest.raises(ValueError, match="item ids"):
        know_but_cannot_tell(qa.with_columns(pl.lit("zzz").alias("item_id")), cap, n_resamples=0)


def test_kt_item_level_question_joins_every_object():
    d = "dynamic_object_number"
    qa = _qa([(d, "a", None, CapabilityQAVerdict.CORRECT)])
    cap = _rows([(d, "a", 0, V.POSITIVE), (d, "a", 1, V.NEGATIVE), (d, "a", 2, V.MISS)])
    assert _value(know_but_cannot_tell(qa, cap, n_resamples=0), d, "kt")["value"] == pytest.approx(200 / 3)


def test_metrics_take_captions_without_a_verdict_column_and_default_to_strict():
    """CAPTIONS given with ITEMS: every captioner seen there is expected to have verdicts (an absent one is
    MISSING); the protocol's compute_metrics follows the run's mode, strict unless it says official."""
    import pyarrow as pa

    from capeval.engine.schemas import CAPTIONS, ITEMS, conform

    items = conform(pa.table({"benchmark": ["capability"] * 2, "task": ["scene"] * 2, "item_id": ["s0", "s1"],
                              "video_id": ["s0", "s1"], "annotation": ["park", "beach"]}), ITEMS)
    caps = conform(pa.table({"caption_key": ["k0", "k1"], "captioner": ["m", "m"], "prompt_id": ["p", "p"],
                             "frame_spec": ["f", "f"], "video_id": ["s0", "s1"], "text": ["a park", None]}), CAPTIONS)
    v = _rows([("scene", "s0", None, V.POSITIVE)]).with_columns(pl.lit("p").alias("prompt_id"),
                                                                pl.lit("f").alias("frame_spec"))
    strict = PROTOCOL.compute_metrics(v, items=items, captions=caps, n_resamples=0, prompts="ignored.toml")
    row = _value(strict, "scene", "recall")
    assert (row["value"], row["n"], row["n_missing"], row["mode"]) == (50.0, 2, 1, "strict")
    official = _value(PROTOCOL.compute_metrics(v, items=items, captions=caps, n_resamples=0, mode="official"),
                      "scene", "recall")
    assert (official["value"], official["n"], official["mode"]) == (100.0, 1, "official")


def test_text_annotations_that_look_like_numbers_render_verbatim():
    import pyarrow as pa

    from capeval.engine.schemas import CAPTIONS, ITEMS, conform

    items = conform(pa.table({"benchmark": ["capability"] * 2, "task": ["OCR", "object_number"],
                              "item_id": ["o1", "n1"], "video_id": ["o1", "n1"],
                              "annotation": ["1.50", json.dumps({"cup": 3})]}), ITEMS)
    caps = conform(pa.table({"caption_key": ["k1", "k2"], "captioner": ["m", "m"], "prompt_id": ["p", "p"],
                             "frame_spec": ["f", "f"], "video_id": ["o1", "n1"], "text": ["A sign reads 1.50.", "x"]}),
                   CAPTIONS)
    rows = {r["task"]: r for r in PROTOCOL.build_requests(items, caps, judge="j", judge_revision="r").to_pylist()}
    assert "Visible text (annotation):\n<<<annotation " in rows["OCR"]["user"]  # strict mode fences it as data
    assert "\n1.50\n<<<end annotation " in rows["OCR"]["user"]
    assert "{cup: 3}" in rows["object_number"]["user"]
    ok = '{"OCR": "1.50", "score": 1, "reason": "x"}'
    assert PROTOCOL.parse(rows["OCR"], ok)[0] == V.POSITIVE


def test_kt_object_without_its_caption_row_counts_as_no_verdict():
    d = "dynamic_object_number"
    qa = _qa([(d, "a", 0, CapabilityQAVerdict.CORRECT), (d, "a", 1, CapabilityQAVerdict.CORRECT)])
    cap = _rows([(d, "a", 1, V.MISS)])
    row = _value(know_but_cannot_tell(qa, cap, n_resamples=0, mode="strict"), d, "kt")
    assert (row["value"], row["n"], row["n_no_verdict"]) == (pytest.approx(100.0), 2, 1)
    row = _value(know_but_cannot_tell(qa, cap, n_resamples=0, mode="official"), d, "kt")
    assert (row["value"], row["n"], row["n_no_verdict"]) == (pytest.approx(100.0), 1, 1)
