"""VidCapBench score extraction per mode: the official substring cascade on the whole reply vs the strict JSON
`score` field (capeval's), on replies where they disagree."""

import json

import pytest

from engine.protocols.vidcapbench.parsing import official_score, parse
from engine.schemas import NO_VERDICT, ParseStatus


def request(mode, step="score"):
    return {"step": step, "context": json.dumps({"parse": {"answer": "a dog", "settings": {"mode": mode}}})}


@pytest.mark.parametrize("reply,official,strict", [
    ("{'score': 2, 'analysis': 'exact'}", 2, 2),
    ("{'score': 0, 'analysis': 'the first 10 words say nothing'}", 1, 0),   # "1" of "10" wins officially
    ("{'score': -1, 'analysis': 'the reference has 2 people'}", 2, -1),     # "2" anywhere wins officially
    ("{'score': 1, 'analysis': 'see note -1'}", -1, 1),                     # "-1" is tested before "1"
    ('```json\n{"score": "1", "analysis": "string score"}\n```', 1, 1),
    ("Score: 1\nAnalysis: partly right.", 1, None),                         # no JSON field: no strict verdict
    ("{'score': 10, 'analysis': 'perfect'}", 1, None),                      # out of range for the field
    ("{'score': 'two', 'analysis': 'match'}", None, None),                  # no digit at all
    ("I cannot judge this.", None, None),
    ("", None, None),
])
def test_official_cascade_and_strict_field_disagree_where_expected(reply, official, strict):
    assert official_score(reply) == official
    code, status, _ = parse(request("official"), reply)
    assert (None if code == NO_VERDICT else code - 1) == official
    assert (status == ParseStatus.FAILED) == (official is None)
    code, status, _ = parse(request("strict"), reply)
    assert (None if code == NO_VERDICT else code - 1) == strict
    assert (status == ParseStatus.FAILED) == (strict is None)


def test_answer_step_keeps_the_reply_unparsed_in_official_mode():
    code, status, detail = parse(request("official", "answer"), "  Red.\n")
    assert status == ParseStatus.OK and json.loads(detail)["answer"] == "  Red.\n"
    assert parse(request("official", "answer"), "")[1] == ParseStatus.OK  # an empty reply is still a reply
    assert parse(request("strict", "answer"), "")[1] == ParseStatus.FAILED
    assert official_score(None) is None
