"""The JSON fast path of CAPability's reply extraction (official.PLAIN_OBJECT + json.loads) gives exactly what the
official ast.literal_eval step gives, and takes over only replies of the plain structured shape.

Reference: ast.literal_eval of the fenced body (the official rule), compared with types and key order. Inputs: every
reply of the parse oracle, hand-picked strings on which JSON and Python literals differ, and seeded random replies
(json.dumps of random values, some mutated with characters that matter to either grammar)."""

from __future__ import annotations

import ast
import json
import os
import random
import re
from pathlib import Path

import pytest

#: literal_eval warns about invalid escapes in some generated replies; the outcome is what is compared
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::SyntaxWarning")

from capeval.engine.packs import load_pack
from capeval.engine.protocols.capability import official, parsing
from capeval.engine.protocols.capability.prompts import categories
from capeval.engine.schemas import ParseStatus

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "protocols"
ORACLE = Path(os.environ.get("CAPEVAL_ORACLE_DIR", SHARED)) / "capability_parse_oracle.jsonl"
PACK = Path(os.environ.get("CAPEVAL_PACK_DIR", SHARED)) / "capability.toml"
CASES = [json.loads(line) for line in ORACLE.read_text().splitlines() if line.strip()] if ORACLE.is_file() else []

#: Replies as strict mode's JSON schemas make a judge write them (the overhead benchmark's instant judge among them).
STRUCTURED = [
    '{"pred": ["N/A"], "reason": "instant"}',
    '{"object_number": "thing: 2", "object_color": "thing: red", "score": 1, "reason": "instant"}',
    '{"event": "A man runs.", "score": -1, "reason": "Le légendaire « café » — 😀"}',
    '{\n  "pred": ["level angle", "high angle"],\n  "reason": "x"\n}\n',
    ' \t{"scene":"park","score":0,"reason":""}',
    '{"object_color": "{\\"shirt\\": \\"red\\"}", "score": 1, "reason": "says \\"red\\"\\n\\t\\\\ \\u00e9"}',
    '{}',
]

#: Past Python's int-to-text limit: literal_eval rejects it and json.loads raises ValueError (strict mode's lenient
#: fallback in capeval.engine.replies.repair reads that as an unparseable reply: tests/judging/test_judging_parsing.py).
HUGE_INT = '{"score": ' + "9" * 5000 + '}'
#: Bodies on which json.loads and ast.literal_eval disagree (or one of them fails), and near misses of the grammar.
ADVERSARIAL = [
    '{"score": true}', '{"score": false}', '{"score": null}', '{"score": True}', '{"score": None}',
    '{"reason": "a\\/b"}', '{"reason": "\\u00e9"}', '{"reason": "\\ud83d\\ude00"}', '{"reason": "\\x41"}',
    '{"reason": "\\N{BULLET}"}', '{"reason": "\\uD800"}', '{"reason": "\\udbff\\udc00"}', '{"reason": "\\u12"}',
    '{"reason": "\\U0001F600"}', '{"reason": "\\\'"}', '{"reason": "\\a\\v\\0"}', '{"reason": "\\u0000\\b\\f"}',
    '{"reason": "\\\\"}', '{"reason": "\\"}', '{"reason": "\\ "}', '{"reason": "\\\n"}', '{"reason": "a\\\nb"}',
    "{'score': 1}", '{"score": 1},', '({"score": 1})',
    '{"score": NaN}', '{"score": Infinity}', '{"score": -Infinity}', '{"score": 1.0}', '{"score": 1e0}',
    '{"score": 01}', '{"score": 00}', '{"score": 1_0}', '{"score": +1}', '{"score": - 1}', '{"score": --1}',
    '{"score": \u0661}', '{"score": 1,}', '{"pred": ["N/A",]}', '{"score": 1} # note', '{"score": 1 # note\n}',
    '{"reason": "a\rb"}', '{"reason": "a\nb"}', '{"reason": "a\tb"}', '{"reason": "a\x00b"}', '{"reason": "\x7f"}',
    '{"reason": "\ud800"}', '{"reason": "\udfff x"}', '{"reason": "a" "b"}', '{"reason": """a"""}',
    '{"reason": r"a"}', '{"reason": b"a"}', '{"score": 1j}', '{"a": {"b": 1}}', '{"a": [[1]]}', '{"a": (1, 2)}',
    '{"a": {1, 2}}', '{1: 1}', '{"score": 1234567890123456789}', '{"score": 123456789012345678}',
    HUGE_INT, '\ufeff{"score": 1}', '\n{"score": 1}', '\x0c{"score": 1}',
    '{"score":\x0c1}', '{"score":\r\n1}', '{"score": 1}\r\n', '{"score": 1}\n\t ', '{"score": 1} x', '{"score": 1}}',
    '{{"score": 1}', '{"score" 1}', '{"score": 1 "reason": ""}', '{"a": 1, "a": 2, "b": 3}', '{"a": [], "b": [""]}',
    '{"a": -0}', '{"a": [-0, 0, -1]}', "", " ", "None", "null", "[1]", '"text"', "1", "...", "{...}",
    '{"reason": "`"}', '```json\n{"score": 1}\n```', '```python\n{"score": true}\n```', '```\n{"score": 1}',
    'Sure:\n```json\n{"score": 1}\n``` and ```json\n{"score": 0}\n```',
]


def _typed(value):
    """A value with every type spelled out (True != 1, 1.0 != 1, dict key order kept) for exact comparison."""
    if isinstance(value, dict):
        return ("dict", tuple((_typed(k), _typed(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_typed(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, tuple(sorted(repr(_typed(v)) for v in value)))
    return (type(value).__name__, repr(value))


def _reference(text):
    """The official extraction as the script does it: literal_eval of the fenced body; None and errors reject."""
    try:
        value = ast.literal_eval(official._fenced_body(text))
    except Exception:  # noqa: BLE001 - every failure is a rejection officially
        return "rejected"
    return "rejected" if value is None else _typed(value)


def _outcome(text):
    try:
        return _typed(official.extract(text))
    except official.Rejected:
        return "rejected"


_CHARS = list('"\'\\/{}[]:,-0123456789 \t\n\r#eE.+_tfnNI()`') + [
    "\x00", "\x0c", "\x1f", "\x7f", "\ud800", "é", "😀", "\u2028", "\ufeff", "\u0661", "true", "null", "NaN",
    "\\u00e9", "\\ud83d", "\\n", '\\"', "\\/", "\\x41"]
_WORDS = ["score", "reason", "pred", "N/A", "thing: 2", "level angle", "1", "-1", 'a "q"', "t\tb", "é😀", "x\\y", ""]


def _random_value(rng, depth=0):
    pick = rng.random()
    if depth > 2 or pick < 0.4:
        return rng.choice(_WORDS)
    if pick < 0.6:
        return rng.choice([0, 1, -1, 2, 10 ** rng.randint(0, 25), -(10 ** 19), 1.0, 0.5, True, False, None])
    if pick < 0.85:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(_WORDS): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _random_reply(rng) -> str:
    value = {rng.choice(_WORDS): _random_value(rng) for _ in range(rng.randint(0, 4))}
    text = json.dumps(value, ensure_ascii=rng.random() < 0.3, indent=rng.choice([None, None, 2, "\t"]),
                      separators=rng.choice([None, (",", ":"), (" , ", " : ")]))
    chars = list(text)
    for _ in range(rng.choice([0, 0, 1, 2, 3])):  # mutations
        i = rng.randrange(len(chars))
        if rng.random() < 0.5:
            chars.insert(i, rng.choice(_CHARS))
        else:
            chars[i] = rng.choice(_CHARS)
    return rng.choice(["", "", " \t", "\n", "```json\n"]) + "".join(chars) + rng.choice(["", "", "\n", " \n\t", ","])


RANDOM = [_random_reply(random.Random(seed)) for seed in range(3000)]
ORACLE_REPLIES = [text for case in CASES for text in case["replies"]]


@pytest.mark.parametrize("texts", [STRUCTURED, ADVERSARIAL, ORACLE_REPLIES, RANDOM],
                         ids=["structured", "adversarial", "oracle", "random"])
def test_extraction_equals_literal_eval(texts):
    for text in texts:
        assert _outcome(text) == _reference(text), text


def test_fast_path_is_taken_for_structured_replies_and_both_paths_occur():
    assert all(official.read(t)[1] for t in STRUCTURED)
    plain = [official.PLAIN_OBJECT.fullmatch(official._fenced_body(t)) is not None for t in RANDOM]
    assert 100 < sum(plain) < len(RANDOM) - 300  # the random set exercises both sides of the grammar


def test_fast_path_never_takes_a_body_where_json_and_literal_eval_differ():
    """Bodies on which the two parsers disagree must all be left to literal_eval."""
    for text in ADVERSARIAL + RANDOM:
        body = official._fenced_body(text)
        try:
            as_json = _typed(json.loads(body))
        except Exception:  # noqa: BLE001
            as_json = "rejected"
        if as_json != _reference(body):
            assert official.PLAIN_OBJECT.fullmatch(body) is None, body


def _contexts():
    """One parse context per task, mode and strict_match, with the oracle's annotations and the pack's categories."""
    if not PACK.is_file():
        pytest.skip(f"official pack {PACK} not present")
    pack, seen = load_pack(PACK), {}
    for case in CASES:
        task, anno = case["task"], case["annotation"]
        anno = dict([next(iter(anno.items()))]) if task == "dynamic_object_number" else anno
        base = {"task": task, "annotation": anno}
        if task in ("camera_angle", "camera_movement", "style"):
            cats = categories(pack, task)
            base.update(names=list(cats.names), explains=list(cats.explains))
        for mode in ("strict", "official"):
            for strict_match in (False, True):
                seen.setdefault((task, mode, strict_match), {**base, "mode": mode, "strict_match": strict_match})
    return list(seen.values())


@pytest.mark.skipif(not CASES, reason="parse oracle not present")
def test_parse_outcomes_are_the_same_without_the_fast_path(monkeypatch):
    """Whole parse results (verdict, status, detail or error text) with the fast path and with it switched off."""
    contexts = _contexts()
    texts = STRUCTURED + ADVERSARIAL + ORACLE_REPLIES + RANDOM[:200]

    def outcomes():
        out = []
        for ctx in contexts:
            parse = parsing.parse_strict if ctx["mode"] == "strict" else parsing.parse_official
            out.extend(parse(ctx["task"], text, ctx) for text in texts)
        return out

    fast = outcomes()
    monkeypatch.setattr(official, "PLAIN_OBJECT", re.compile(r"(?!)"))  # matches nothing: literal_eval for all
    assert fast == outcomes()
    assert sum(s != ParseStatus.FAILED for _, s, _ in fast) > 1000  # accepted replies are among those compared
