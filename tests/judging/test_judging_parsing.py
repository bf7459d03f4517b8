"""Parsers per protocol, on well-formed and malformed judge outputs; CapQuiz's shuffle."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from capeval.engine.protocols.capability import CapabilityVerdict
from capeval.engine.protocols.capquiz import CapQuizVerdict
from capeval.engine.protocols.capquiz.prompts import LETTERS, shuffle_order
from capeval.engine.protocols.lvcap import EntailmentVerdict, SceneQAVerdict
from capeval.engine.protocols.vidcapbench import VidCapBenchVerdict
from capeval.engine.protocols.vidcapbench.parsing import official_counts_as_correct
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, NO_VERDICT, ParseStatus, conform


def _items(benchmark, rows):
    return conform(pa.table({k: [r.get(k) for r in rows] for k in ITEMS.names} | {"benchmark": [benchmark] * len(rows)}),
                   ITEMS)


CAPS = conform(pa.table({"caption_key": ["k1"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
                         "video_id": ["v1"], "text": ["A man in a red coat walks two dogs past a bakery."]}), CAPTIONS)


def _requests(protocol, rows, **kw):
    p = lookup("protocol", protocol)
    return p, p.build_requests(_items(protocol, rows), CAPS, judge="j", judge_revision="r", **kw).to_pylist()


# -- CapQuiz ------------------------------------------------------------------------------------------------------
QUIZ = {"task": "action", "item_id": "quiz-7", "video_id": "v1", "annotation": "What does the man walk?",
        "options": ["a cat", "two dogs", "a horse", "a bike", "nothing"], "answer": "two dogs"}


def test_capquiz_shuffle_is_deterministic_per_item_and_independent_of_order():
    other = dict(QUIZ, item_id="quiz-8")
    _, forward = _requests("capquiz", [QUIZ, other])
    _, backward = _requests("capquiz", [other, QUIZ])
    by_item = lambda rows: {r["item_id"]: r["user"] for r in rows}  # noqa: E731
    assert by_item(forward) == by_item(backward)
    assert shuffle_order("quiz-7") == shuffle_order("quiz-7")
    assert sorted(shuffle_order("quiz-7")) == list(range(5))
    # the shuffle really depends on the id: across many ids, several permutations occur
    assert len({tuple(shuffle_order(f"q{i}")) for i in range(50)}) > 10


def test_capquiz_letters_map_back_through_the_shuffle():
    p, (req,) = _requests("capquiz", [QUIZ])
    order = shuffle_order("quiz-7")
    correct = LETTERS[order.index(QUIZ["options"].index("two dogs"))]
    assert f"{correct}. two dogs" in req["user"] and "F. Cannot be determined" in req["user"]
    wrong = next(letter for letter in LETTERS if letter != correct)
    assert p.parse(req, correct)[:2] == (CapQuizVerdict.CORRECT, ParseStatus.OK)
    assert p.parse(req, wrong)[:2] == (CapQuizVerdict.WRONG, ParseStatus.OK)
    assert p.parse(req, "F")[:2] == (CapQuizVerdict.CANNOT_DETERMINE, ParseStatus.OK)
    assert p.parse(req, f"**{correct.lower()}.**")[:2] == (CapQuizVerdict.CORRECT, ParseStatus.REPAIRED)
    assert p.parse(req, f"Answer: ({correct})")[:2] == (CapQuizVerdict.CORRECT, ParseStatus.REPAIRED)
    for bad in ("", "G", "B and C", "I think the answer could be B", None):  # option text parses now (issue 7)
        code, status, _ = p.parse(req, bad)
        assert (code, status) == (NO_VERDICT, ParseStatus.FAILED), bad


# -- CAPability ----------------------------------------------------------------------------------------------------
def test_capability_scores_from_fenced_single_quoted_and_string_json():
    p, reqs = _requests("capability", [
        {"task": "object_color", "item_id": "c1", "video_id": "v1", "annotation": json.dumps({"coat": "red"})},
        {"task": "dynamic_object_number", "item_id": "d1", "video_id": "v1",
         "annotation": json.dumps({"dog": 2, "man": 1})},
    ])
    color, dog, man = sorted(reqs, key=lambda r: (r["item_id"], r["sub_index"]))
    assert "{coat: red}" in color["user"] and "{dog: 2}" in dog["user"] and "{man: 1}" in man["user"]
    assert (dog["sub_index"], man["sub_index"]) == (0, 1)
    # strict mode runs the official validator: object_color replies must copy the {object: color} field
    assert p.parse(color, '{"object_color": "{coat: red}", "score": 1, "reason": "red coat"}')[:2] == (
        CapabilityVerdict.POSITIVE, ParseStatus.OK)
    assert p.parse(color, '{"score": 1, "reason": "red coat"}')[:2] == (NO_VERDICT, ParseStatus.FAILED)
    assert p.parse(color, '```json\n{"object_color": "coat: red", "score": "-1", "reason": "says blue"}\n```')[:2] == (
        CapabilityVerdict.NEGATIVE, ParseStatus.REPAIRED)
    assert p.parse(color, "Here: {'object_color': '{coat: red}', 'score': 0, 'reason': 'no color'} done")[:2] == (
        CapabilityVerdict.MISS, ParseStatus.REPAIRED)
    for bad in ('{"score": 3, "reason": "x"}', '{"reason": "no score"}', "score one", '{"score": "high"}'):
        assert p.parse(color, bad)[:2] == (NO_VERDICT, ParseStatus.FAILED), bad


def test_capability_classification_pred_lists():
    p, (req,) = _requests("capability", [{"task": "camera_angle", "item_id": "a1", "video_id": "v1",
                                          "annotation": "high angle"}])
    assert json.loads(req["json_schema"])["properties"]["pred"]["items"]["enum"][-1] == "N/A"
    assert p.parse(req, '{"pred": ["high angle"], "reason": "overhead"}')[0] == CapabilityVerdict.POSITIVE
    assert p.parse(req, '{"pred": ["low angle"], "reason": "x"}')[0] == CapabilityVerdict.NEGATIVE
    assert p.parse(req, '{"pred": ["N/A"], "reason": "x"}')[0] == CapabilityVerdict.MISS
    # the official prompt asks for "a python list" inside a JSON string
    assert p.parse(req, '{"pred": "[\'level angle\', \'high angle\']", "reason": "x"}')[:2] == (
        CapabilityVerdict.POSITIVE, ParseStatus.REPAIRED)


# -- VidCapBench ---------------------------------------------------------------------------------------------------
def test_vidcapbench_score_comes_from_the_json_field_not_the_analysis_text():
    p = lookup("protocol", "vidcapbench")
    req = {"step": "score", "context": json.dumps({"parse": {"answer": "three dogs"}})}
    text = '{"analysis": "The reference says 2 dogs; the answer says three, which contradicts it.", "score": -1}'
    code, status, detail = p.parse(req, text)
    assert (code, status) == (VidCapBenchVerdict.INCORRECT, ParseStatus.OK)
    assert json.loads(detail)["answer"] == "three dogs"
    assert official_counts_as_correct(text)  # the official substring test would have called this fully correct
    assert p.parse(req, '```json\n{"analysis": "ok", "score": "2"}\n```')[:2] == (
        VidCapBenchVerdict.CORRECT, ParseStatus.REPAIRED)
    assert p.parse(req, '{"analysis": "partly", "score": 1}')[0] == VidCapBenchVerdict.PARTIAL
    assert p.parse(req, '{"analysis": "x", "score": 5}')[:2] == (NO_VERDICT, ParseStatus.FAILED)
    assert p.parse(req, "The answer deserves a 2.")[:2] == (NO_VERDICT, ParseStatus.FAILED)


def test_vidcapbench_seeds_become_trials():
    _, reqs = _requests("vidcapbench", [{"task": "default", "item_id": "q", "video_id": "v1",
                                         "annotation": "How many dogs?", "answer": "two"}], seeds=(0, 1, 2))
    assert sorted((r["trial"], r["seed"]) for r in reqs) == [(0, 0), (1, 1), (2, 2)]
    assert len({r["request_key"] for r in reqs}) == 3 and {r["step"] for r in reqs} == {"answer"}


# -- LVCap ---------------------------------------------------------------------------------------------------------
def test_lvcap_scene_and_entailment(shared_data):
    with open(shared_data / "dream1k" / "DREAM-1k.jsonl") as f:
        rec = json.loads(f.readline())
    events = rec["extra_info"]["events"]
    p, reqs = _requests("lvcap", [
        {"task": "scene", "item_id": "s1", "video_id": "v1", "annotation": "Is it daytime?", "answer": "Yes"},
        {"task": "events", "item_id": "e1", "video_id": "v1", "annotation": json.dumps(events),
         "answer": rec["messages"][1]["content"][0]["reference"]},
    ])
    steps = sorted(r["step"] for r in reqs)
    assert steps == sorted(["answer", "extract"] + ["entail_r"] * len(events))
    scene = next(r for r in reqs if r["step"] == "answer")
    assert p.parse(scene, "yes")[:2] == (SceneQAVerdict.CORRECT, ParseStatus.OK)
    assert p.parse(scene, "No.")[:2] == (SceneQAVerdict.WRONG, ParseStatus.REPAIRED)
    assert p.parse(scene, "maybe")[:2] == (NO_VERDICT, ParseStatus.FAILED)
    entail = next(r for r in reqs if r["step"] == "entail_r")
    assert entail["user"].rstrip().endswith("Relationship:") and events[0] in entail["user"]
    assert p.parse(entail, "entailment")[0] == EntailmentVerdict.ENTAILMENT
    assert p.parse(entail, "Contradiction")[0] == EntailmentVerdict.CONTRADICTION
    extract = next(r for r in reqs if r["step"] == "extract")
    code, status, detail = p.parse(extract, '```json\n["A man walks.", "A dog barks.",]\n```')
    assert status == ParseStatus.REPAIRED and json.loads(detail)["events"] == ["A man walks.", "A dog barks."]
    assert p.parse(extract, '{"events": 3}')[1] == ParseStatus.FAILED


# -- VC-Inspector --------------------------------------------------------------------------------------------------
def test_vcinspector_score_field():
    p = lookup("protocol", "vcinspector")
    assert p.parse({}, '{"score": 4, "explanation": "mostly right"}')[:2] == (3, ParseStatus.OK)
    assert p.parse({}, "Sure! {\"score\": \"5\", \"explanation\": \"all correct\"} Hope this helps.")[:2] == (
        4, ParseStatus.REPAIRED)
    assert p.parse({}, '{"score": 0, "explanation": "x"}')[:2] == (NO_VERDICT, ParseStatus.FAILED)


def test_requests_sharing_a_caption_are_adjacent_and_caption_comes_before_the_question():
    caps = conform(pa.table({"caption_key": ["kb", "ka"], "captioner": ["m", "m"], "prompt_id": ["p", "p"],
                             "frame_spec": ["f", "f"], "video_id": ["v1", "v1"], "text": ["cap B", "cap A"]}), CAPTIONS)
    p = lookup("protocol", "capquiz")
    items = _items("capquiz", [dict(QUIZ, item_id=f"q{i}") for i in range(4)])
    reqs = p.build_requests(items, caps, judge="j", judge_revision="r").to_pylist()
    keys = [r["caption_key"] for r in reqs]
    assert keys == sorted(keys) and len(reqs) == 8
    for r in reqs:
        assert r["user"].index("cap ") < r["user"].index("Question:")


@pytest.mark.parametrize("text", ['{"score": ' + "9" * 5000 + "}", "[" * 100_000 + "]" * 100_000])
def test_unreadable_json_is_a_parse_error_not_a_crash(text):
    """An integer past Python's 4,300-digit conversion limit or nesting past the recursion limit: json.loads raises
    ValueError / RecursionError, not JSONDecodeError; the reply is unparseable (re-askable), the run goes on."""
    from capeval.engine.replies.repair import ParseError, extract_json

    with pytest.raises(ParseError):
        extract_json(text)
