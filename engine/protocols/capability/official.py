"""CAPability's official reply rules, as data in -> outcome out (ali-vilab/CAPability @ cebb82a, evaluation/eval.py).

Written from the observable behaviour of the official script (and checked against the outcomes it produced on
scripted replies, ../shared/protocols/capability_parse_oracle.jsonl), not copied from it:

* extraction (eval.py:371-382): a "```json" mark -> the text after the LAST such mark up to the next fence; then a
  "```python" mark likewise, or else any "```" -> the text between the first two fences; then `ast.literal_eval`
  (so JSON true/false/null, comments and prose around the object are rejected; single quotes and trailing commas
  inside the literal pass; a comma after the dict makes a tuple);
* validation per task (eval.py:120-343): see `validate`. `strict_match=False` is what the official __main__ runs
  (the copied annotation field is not compared, except that object_number / object_color still parse it);
* a reply that fails any of this is "rejected": not saved, re-asked in the next retry round.

Whole-run rules (the end of this file, used by metrics.py): an item with no caption stops the script at its task
(`uncaptioned`); a run of at most max_allow_missing items is never asked (engine/judging/rounds.py).

`accept(...)` returns the official score (the value the script stores: 1 / 0 / -1, possibly as True or 1.0, or a
category verdict for the classification tasks) or raises `Rejected`.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

import polars as pl

#: The official retry rule (eval.py:427-468, argparse defaults): up to 5 more rounds, stopping once at most 5 items
#: are still unanswered; re-asks resend the same request.
OFFICIAL_MAX_RETRY_TIMES = 5
OFFICIAL_MAX_ALLOW_MISSING = 5

from capeval.engine.schemas import ParseStatus

from .codes import CLASSIFICATION_TASKS, CapabilityVerdict
from .groups import GROUP_COLUMNS, with_groups

#: The field in which the judge copies the annotation back, per scored task (classification tasks have none).
COPIED_FIELD = {
    "event": "event", "action": "action", "object_category": "object_category", "object_number": "object_number",
    "dynamic_object_number": "object_number", "object_color": "object_color", "spatial_relation": "spatial_relation",
    "scene": "scene", "OCR": "OCR", "character_identification": "character_identification",
}
_SCORE_TEXT = ("-1", "0", "1")
_SCORES = (1, 0, -1)
_FENCE = "```"


class Rejected(ValueError):
    """A reply the official script does not save. `stage`: "api" (no content), "parse" (extraction /
    literal_eval) or "validate" (the per-task checks)."""

    def __init__(self, stage: str, message: str):
        super().__init__(f"{stage}: {message}")
        self.stage = stage


@dataclass(frozen=True)
class Categories:
    """A classification task's label set: exact names, and the 'name: explanation' lines the prompt shows."""

    names: tuple[str, ...]
    explains: tuple[str, ...] = ()


# --- extraction -----------------------------------------------------------------------------------------------

def _fenced_body(text: str) -> str:
    """The text literal_eval sees, after the official fence rules."""
    body = text
    if _FENCE + "json" in body:
        body = body.rsplit(_FENCE + "json", 1)[1].partition(_FENCE)[0].strip()
    # This second test also runs after a json block was taken (then it never matches: the block holds no fence).
    if _FENCE + "python" in body:
        body = body.rsplit(_FENCE + "python", 1)[1].partition(_FENCE)[0].strip()
    elif _FENCE in body:
        body = body.split(_FENCE)[1].strip()
    return body


# The shape structured decoding gives (strict mode's JSON schemas): one object whose members map plain text to plain
# text, an integer or a list of those. Plain text holds no raw control character (JSON rejects them, Python ends the
# literal at a newline), no raw surrogate (Python cannot encode the source) and only the escapes both languages read
# alike: \" \\ \b \f \n \r \t and \uXXXX outside the surrogates (a JSON pair \ud83d\ude00 is one character,
# to Python two; \/ is '/' to JSON, two characters to Python). Integers have no leading zero and at most 18 digits (no
# int-size limit applies), a '-' directly before the digits (literal_eval negates the int: the same value).
# Whitespace is what both skip there: ' '/tab before the object (literal_eval strips them), ' '/tab/newline between
# tokens (implicit line joining inside brackets), and after it either ' '/tab only or anything ending in a newline (a
# last line of only spaces is an 'unexpected indent' to Python). Such a body has no true/false/null, quotes other than
# '"', comments, tuples, trailing commas or floats, so json.loads gives exactly literal_eval's value (duplicate keys
# included: both keep the first position and the last value); every other body takes literal_eval itself.
_TEXT_RUN = r'[^"\\\x00-\x1f\ud800-\udfff]*'
_PLAIN_TEXT = rf'"{_TEXT_RUN}(?:\\(?:["\\bfnrt]|u(?![dD][89a-fA-F])[0-9a-fA-F]{{4}}){_TEXT_RUN})*"'
_PLAIN_SCALAR = rf'(?:{_PLAIN_TEXT}|-?(?:0|[1-9][0-9]{{0,17}}))'
_WS = r'[ \t\n]*'
_PLAIN_VALUE = rf'(?:{_PLAIN_SCALAR}|\[{_WS}(?:{_PLAIN_SCALAR}{_WS}(?:,{_WS}{_PLAIN_SCALAR}{_WS})*)?\])'
_PLAIN_MEMBER = rf'{_PLAIN_TEXT}{_WS}:{_WS}{_PLAIN_VALUE}{_WS}'
PLAIN_OBJECT = re.compile(rf'[ \t]*\{{{_WS}(?:{_PLAIN_MEMBER}(?:,{_WS}{_PLAIN_MEMBER})*)?\}}(?:{_WS}\n|[ \t]*)')


def read(text: str | None) -> tuple[Any, bool]:
    """(extract(text), plain): `plain` when the fenced body matched PLAIN_OBJECT, so the value is json.loads'
    (the same as literal_eval's, and json can write it back)."""
    if text is None:
        raise Rejected("api", "the judge returned no content")
    body = _fenced_body(text)
    if PLAIN_OBJECT.fullmatch(body):
        try:
            return json.loads(body), True
        except ValueError:  # not reachable for that grammar; literal_eval below stays the authority if it were
            pass
    return _literal(body), False


def extract(text: str | None) -> Any:
    """The Python value of a raw reply, or Rejected."""
    return read(text)[0]


def _literal(body: str) -> Any:
    """The official step itself: ast.literal_eval of the fenced body, or Rejected."""
    try:
        value = ast.literal_eval(body)
    except (SyntaxError, ValueError) as exc:
        raise Rejected("parse", f"not a Python literal after fence stripping ({type(exc).__name__})") from None
    except Exception as exc:  # noqa: BLE001 - e.g. RecursionError on absurd nesting: the official worker dies
        raise Rejected("parse", f"literal_eval failed: {type(exc).__name__}") from None
    if value is None:  # the official caller treats a None result like a failed call
        raise Rejected("parse", "the reply evaluates to None")
    return value


# --- validation -----------------------------------------------------------------------------------------------

def _need(cond: bool, message: str) -> None:
    if not cond:
        raise Rejected("validate", message)


def _field(reply, key: str):
    try:
        return reply[key]
    except (KeyError, TypeError, IndexError) as exc:
        raise Rejected("validate", f"no {key!r} field ({type(exc).__name__})") from None


def _score(reply) -> Any:
    """The score as the official script keeps it: '1'/'0'/'-1' become ints; anything == 1, 0 or -1 passes."""
    value = _field(reply, "score")
    try:
        if value in _SCORE_TEXT:
            value = int(value)
        ok = value in _SCORES
    except Exception:  # noqa: BLE001 - an exotic value whose comparison raises
        ok = False
    _need(ok, f"score {value!r} is not 1, 0 or -1")
    return value


def _copied_number(value) -> int:
    """object_number's copied '{object: number}' field -> the number (exactly one ':'; int() of the rest)."""
    try:
        if isinstance(value, str):
            _need(":" in value, f"copied field {value!r} has no ':'")
            parts = value.lstrip("{").rstrip("}").split(":")
            _need(len(parts) == 2, f"copied field {value!r} has more than one ':'")
            return int(parts[1].strip())
        if isinstance(value, dict):
            first = next(iter(value.values()))
            return int(first.strip())  # a non-text value has no .strip(): rejected, as officially
    except Rejected:
        raise
    except Exception as exc:  # noqa: BLE001 - int()/strip()/empty dict failures are rejections
        raise Rejected("validate", f"copied field {value!r}: {type(exc).__name__}") from None
    raise Rejected("validate", f"copied field {value!r} is neither text nor a dict")


def _copied_color(value) -> str:
    """object_color's copied '{object: color}' field -> the colour (text after the last ':', stripped)."""
    try:
        if isinstance(value, str):
            _need(":" in value, f"copied field {value!r} has no ':'")
            return value.lstrip("{").rstrip("}").split(":")[-1].strip()
        if isinstance(value, dict):
            return next(iter(value.values())).strip()
    except Rejected:
        raise
    except Exception as exc:  # noqa: BLE001
        raise Rejected("validate", f"copied field {value!r}: {type(exc).__name__}") from None
    raise Rejected("validate", f"copied field {value!r} is neither text nor a dict")


def _first_value(annotation):
    return next(iter(annotation.values())) if isinstance(annotation, dict) and annotation else annotation


def validate_scored(task: str, reply, annotation, strict_match: bool = False):
    """One reply of a scored task -> its score, or Rejected. For dynamic_object_number this is one object's reply
    and `annotation` that object's {object: number}."""
    _need(isinstance(reply, dict), f"the reply is a {type(reply).__name__}, not a dict")
    field = COPIED_FIELD[task]
    if task == "object_number":
        number = _copied_number(_field(reply, field))
        if strict_match:
            _need(number == _first_value(annotation), f"copied number {number} differs from the annotation")
    elif task == "dynamic_object_number":
        copied = _field(reply, field)
        # eval.py:188 looks a dict-valued field up on the wrapper of all replies: a KeyError, so only text passes.
        _need(isinstance(copied, str), "a dict-valued copied field hits the official KeyError (eval.py:188)")
        number = _copied_number(copied)
        if strict_match:
            _need(number == _first_value(annotation), f"copied number {number} differs from the annotation")
    elif task == "object_color":
        color = _copied_color(_field(reply, field))
        if strict_match:
            _need(color == _first_value(annotation), f"copied colour {color!r} differs from the annotation")
    elif strict_match:
        copied = _field(reply, field)
        try:
            same = copied.strip() == str(annotation).strip()
        except AttributeError:
            same = False
        _need(same, f"copied {field} {copied!r} differs from the annotation")
    return _score(reply)


def validate_classification(task: str, reply, annotation: str, categories: Categories) -> int:
    """One reply of camera_angle / camera_movement / style -> 1 (annotation predicted), 0 (N/A) or -1."""
    _need(isinstance(reply, dict), f"the reply is a {type(reply).__name__}, not a dict")
    _need("pred" in reply, "no 'pred' field")
    pred = reply["pred"]
    try:
        says_na = pred == "N/A" or "N/A" in pred  # substring for text, element for a list, key for a dict
    except TypeError:
        raise Rejected("validate", f"pred {pred!r} cannot be searched for 'N/A'") from None
    if says_na:
        pred = ["N/A"]
    if isinstance(pred, str):
        try:
            pred = ast.literal_eval(pred)
        except Exception as exc:  # noqa: BLE001
            raise Rejected("validate", f"pred text {pred!r} is not a Python list ({type(exc).__name__})") from None
    _need(isinstance(pred, list), f"pred {pred!r} is not a list")
    labels = []
    for p in pred:
        if p in categories.explains:
            # style maps a full 'name: explanation' line to its name; the camera tasks crash on it (eval.py:266, 288)
            _need(task == "style", f"pred element {p!r} is a whole explanation line (official AttributeError)")
            p = p.split(":")[0].lower()
        _need(p == "N/A" or p in categories.names, f"pred element {p!r} is not one of {list(categories.names)}")
        labels.append(p)
    if len(labels) == 1 and labels[0] == "N/A":
        return 0
    return 1 if annotation in labels else -1


def json_safe(value) -> bool:
    """The official script writes each accepted reply with json.dumps before using it; a value json cannot write
    (a set, bytes, ...) crashes it there. capeval treats such a reply as rejected."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def accept(task: str, text: str | None, annotation, *, strict_match: bool = False,
           categories: Categories | None = None):
    """The official outcome of one raw reply (one object's reply for dynamic_object_number)."""
    reply = extract(text)
    if task in CLASSIFICATION_TASKS:
        if categories is None:
            raise ValueError(f"{task}: the category list is needed to validate a reply")
        score = validate_classification(task, reply, annotation, categories)
    else:
        score = validate_scored(task, reply, annotation, strict_match)
    _need(json_safe(reply), "the reply holds values json cannot write (the official script crashes on it)")
    return score


def code_of(score) -> int:
    """An official score value -> CapabilityVerdict: == 1 correct, == 0 miss, anything else a wrong hit
    (calculate_metric: hit = score != 0, correct = score == 1)."""
    if score == 1:
        return int(CapabilityVerdict.POSITIVE)
    if score == 0:
        return int(CapabilityVerdict.MISS)
    return int(CapabilityVerdict.NEGATIVE)


def item_outcome(replies: Sequence[str | None], task: str, annotation, **kw):
    """Outcome of a whole item (dynamic_object_number: one reply per object, all-or-nothing): the score, or a
    list of scores, or Rejected from the first reply that fails."""
    if task != "dynamic_object_number":
        (text,) = replies
        return accept(task, text, annotation, **kw)
    pairs = list(annotation.items())
    if len(replies) != len(pairs):
        raise ValueError(f"dynamic_object_number: {len(replies)} replies for {len(pairs)} objects")
    extracted = [extract(t) for t in replies]  # every call must succeed before any validation (eval.py:388-405)
    scores = [validate_scored(task, r, dict([p]), kw.get("strict_match", False)) for r, p in zip(extracted, pairs)]
    _need(all(json_safe(r) for r in extracted), "a reply holds values json cannot write")
    return scores


# --- whole-run rules: where the official script prints no figure (used by metrics.py in official mode) ----------

NO_CAPTION = ("{n} item(s) of this task have no caption (e.g. {example!r}): the official eval.py asserts that the "
              "captions and annotations cover the same files before it judges a task (intialize_data_by_task), so it "
              "stops there with an AssertionError and prints no figure for this task, nor the average")
NO_AVERAGE = "no average: the official eval.py stops at task {task!r} ({n} item(s) have no caption, AssertionError)"
NOT_REACHED = ("the official eval.py stops before this task: it judges the tasks in order and stops at task {task!r} "
               "({n} item(s) there have no caption, AssertionError), so it prints no figure for this task")


def uncaptioned(rows, items=None, captions=None, *, judged: bool = False) -> dict[tuple, list[str]]:
    """(group..., task) -> ids of items with no caption at all. `rows`: metric rows (polars) with the group columns,
    task, item_id, parse_status and error. With captions: an item that no caption row of a group matches (by
    item_id, else video_id). With `judged` (the verdicts come from a capeval judging run, which writes a row for
    every (item, caption) pair): an item with no verdict row (a MISSING row without error text, added for it).
    A caption row with null text is a failed captioning -- capeval's own retryable failure, left out and counted
    in n_missing -- not an absent caption."""
    keys = [*GROUP_COLUMNS, "task"]
    out: dict[tuple, set] = {}
    if judged:
        added = rows.filter((pl.col("parse_status") == int(ParseStatus.MISSING)) & pl.col("error").is_null())
        for r in added.select(*keys, "item_id").iter_rows():
            out.setdefault(tuple(r[:-1]), set()).add(r[-1])
    if items is not None and captions is not None:
        caps = with_groups(captions).select(*GROUP_COLUMNS, pl.col("video_id").cast(pl.String).alias("_cap")).unique()
        its = items.select(pl.col("task").cast(pl.String), pl.col("item_id").cast(pl.String),
                           pl.col("video_id").cast(pl.String))
        want = caps.select(GROUP_COLUMNS).unique().join(its, how="cross")
        for col in ("item_id", "video_id"):
            want = want.join(caps, left_on=[*GROUP_COLUMNS, col], right_on=[*GROUP_COLUMNS, "_cap"], how="anti")
        for r in want.select(*keys, "item_id").iter_rows():
            out.setdefault(tuple(r[:-1]), set()).add(r[-1])
    return {k: sorted(v) for k, v in out.items()}
