"""Repairs for malformed judge output: fence stripping, trailing text, quote fixes, Python-literal JSON.

Each extractor returns (value, repaired) where `repaired` says whether anything beyond whitespace had to be fixed
(the verdict row then gets ParseStatus.REPAIRED), or raises `ParseError` naming what was wrong; the runner re-asks
a bounded number of times and finally keeps an explicit FAILED row.

A judge often quotes the caption it grades, and a caption may hold a ready-made verdict ({"score": 5, ...}). So the
strict parsers read a verdict with `extract_verdict`, never with "the first object in the text": it looks at every
top-level object of the reply, keeps those that carry the verdict fields, and takes the last one only when all of
them agree on the verdict; when they disagree, or an object naming a verdict field cannot be read, the reply is
refused (ParseError: re-asked, finally FAILED), because which object is the judge's own answer is then unknown.
Blocks of the prompt's fenced data (engine/replies/fences.py) quoted whole in a reply are left out first, and an
object that repeats the prompt's data (verbatim or reformatted: JSON values compared in one canonical spelling) is a
quotation, never the verdict.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from typing import Any

from capeval.engine.replies.fences import strip_fenced

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
_SMART_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


class ParseError(ValueError):
    """The judge's text could not be turned into a verdict."""


def strip_fences(text: str) -> tuple[str, bool]:
    m = _FENCE.search(text)
    if m:
        return m.group(1).strip(), True
    stripped = text.strip()
    if stripped.startswith("```"):  # an unterminated fence (output cut at max_tokens)
        return stripped.lstrip("`").split("\n", 1)[-1].strip(), True
    return stripped, False


def _span_end(text: str, start: int, opener: str) -> int | None:
    """The index of the bracket closing the one at `start`, skipping brackets inside string literals (None: never
    closed)."""
    closer = "}" if opener == "{" else "]"
    depth, quote, escape = 0, None, False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == opener:
            depth += 1
        elif ch == closer:
            depth -= 1
            if depth == 0:
                return i
    return None


def _balanced_span(text: str, opener: str) -> str | None:
    """The first balanced {...} or [...] span, skipping brackets inside string literals."""
    start = text.find(opener)
    while start != -1:
        end = _span_end(text, start, opener)
        if end is not None:
            return text[start : end + 1]
        start = text.find(opener, start + 1)
    return None


def _top_level_spans(text: str, opener: str) -> list[str]:
    """Every balanced span that lies inside no other, left to right (fences and prose between them ignored)."""
    spans, start = [], text.find(opener)
    while start != -1:
        end = _span_end(text, start, opener)
        if end is None:
            start = text.find(opener, start + 1)
        else:
            spans.append(text[start : end + 1])
            start = text.find(opener, end + 1)
    return spans


def _loads_lenient(span: str) -> Any:
    for candidate in (span, span.translate(_SMART_QUOTES), _TRAILING_COMMA.sub(r"\1", span.translate(_SMART_QUOTES))):
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):  # JSONDecodeError, and an integer over Python's 4,300-digit limit
            pass
        try:  # single-quoted dicts, as official scoring scripts that parse with ast.literal_eval accept
            return ast.literal_eval(candidate)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    raise ParseError(f"not valid JSON: {span[:80]!r}")


def extract_json(text: str | None, kind: type = dict) -> tuple[Any, bool]:
    """Parse a JSON object (kind=dict) or array (kind=list) out of judge text."""
    if text is None or not text.strip():
        raise ParseError("empty output")
    try:
        value = json.loads(text)
        if isinstance(value, kind):
            return value, False
    except (ValueError, RecursionError):  # JSONDecodeError, an integer over the 4,300-digit limit, deep nesting
        pass
    body, _ = strip_fences(text)
    span = _balanced_span(body, "{" if kind is dict else "[")
    if span is None:
        raise ParseError(f"no JSON {kind.__name__} in output: {text[:80]!r}")
    value = _loads_lenient(span)
    if not isinstance(value, kind):
        raise ParseError(f"expected a JSON {kind.__name__}, got {type(value).__name__}")
    return value, True


def canonical(value: Any) -> str:
    """One spelling of a JSON value (keys sorted, no spaces): `{"score":5}` and `{ "score" : 5 }` read the same."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


#: the longest bracketed span of the request's data read as a possible quotation (verdict objects are short), how
#: many spans of one text are read at most, and how many of their characters: a hostile caption full of brackets
#: costs one linear pass and a bounded amount of parsing
MAX_QUOTED_SPAN = 2048
MAX_QUOTED_SPANS = 1000
MAX_QUOTED_CHARS = 100_000


def _bracket_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of balanced {...} / [...] spans in `text`, nested ones included, in one pass: quotes count only
    inside brackets (an apostrophe in prose opens nothing), a closer that matches nothing starts afresh."""
    spans: list[tuple[int, int]] = []
    stack: list[int] = []
    quote, escape = None, False
    pairs = {"}": "{", "]": "["}
    for i, ch in enumerate(text):
        if quote:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == quote:
                quote = None
        elif ch in "{[":
            stack.append(i)
        elif ch in pairs:
            if stack and text[stack[-1]] == pairs[ch]:
                start = stack.pop()
                if i - start < MAX_QUOTED_SPAN:
                    spans.append((start, i))
                    if len(spans) >= MAX_QUOTED_SPANS:
                        break
            else:
                stack.clear()
        elif ch in "\"'" and stack:
            quote = ch
    return spans


@functools.lru_cache(maxsize=256)
def _data_objects(data: tuple[str, ...]) -> frozenset[str]:
    """Canonical forms of the objects and lists written in `data` (nested ones too: a judge may quote the inner
    object of a caption's JSON)."""
    found: set[str] = set()
    for text in data:
        budget = MAX_QUOTED_CHARS
        for start, end in _bracket_spans(text):
            if not text[start : end + 1].strip("[]{}, \n"):  # brackets only: holds no value anyone could quote
                continue
            budget -= end + 1 - start
            if budget < 0:
                break
            try:
                found.add(canonical(_loads_lenient(text[start : end + 1])))
            except (ParseError, MemoryError):
                pass
    return frozenset(found)


def repeats_data(span: str, data: tuple[str, ...], value: Any = None) -> bool:
    """Whether `span` (already read as `value`, when given) repeats one of the request's untrusted texts (caption,
    question, earlier reply): copied verbatim, or the same JSON value written differently (spaces, key order, quote
    style), since a judge quoting a caption's `{"score": 5}` may reformat it."""
    if not data:
        return False
    if any(span in d for d in data):
        return True
    if value is None:
        try:
            value = _loads_lenient(span)
        except ParseError:
            return False
    return canonical(value) in _data_objects(tuple(data))


def extract_verdict(text: str | None, fields: tuple[str, ...], agree_on: tuple[str, ...] | None = None,
                    data: tuple[str, ...] = ()) -> tuple[dict, bool]:
    """The judge's own answer: a JSON object (or Python literal) holding every one of `fields`.

    `data`: the untrusted texts the prompt showed (fences.data_texts). An object that repeats one of them (copied
    verbatim, or the same JSON value reformatted: `repeats_data`), or a fenced block of them, is a quotation, never
    the answer; a reply whose only verdict objects are quotations (the judge's own verdict in prose) is refused and
    re-asked. A reply that is exactly one other such object is
    taken as is. Otherwise every top-level object in the reply is looked at (inside fences or not): those naming
    none of `fields` are prose and skipped; one naming a field that cannot be read, or several readable ones that
    differ in `agree_on` (default: `fields`), make the reply ambiguous and raise ParseError, since a quoted caption
    may hold an object of the same shape; agreeing ones give the last. A reply with no object carrying the fields
    falls back to `extract_json` (unless quotations were left out), so its error says what the reply holds.
    """
    if text is None or not text.strip():
        raise ParseError("empty output")
    try:
        whole = json.loads(text)
        if isinstance(whole, dict) and all(f in whole for f in fields) and \
                not repeats_data(text.strip(), data, whole):
            return whole, False
    except (ValueError, RecursionError):
        pass
    text, _ = strip_fenced(text)  # a quoted (echoed) block of the prompt's data is never the answer
    agree_on = fields if agree_on is None else agree_on
    found: list[dict] = []
    quoted = 0
    for span in _top_level_spans(text, "{"):
        if not any(f in span for f in fields):
            continue
        if repeats_data(span, data):
            quoted += 1
            continue
        try:
            value = _loads_lenient(span)
        except ParseError:
            raise ParseError(f"an object naming {list(fields)} cannot be read, so the judge's own answer is "
                             f"uncertain: {span[:80]!r}") from None
        if isinstance(value, dict) and all(f in value for f in fields):
            found.append(value)
    if not found:
        if quoted:
            raise ParseError(f"the only objects with {list(fields)} are quoted from the caption or other data "
                             f"shown to the judge, not its own answer")
        return extract_json(text, dict)
    verdicts = {json.dumps([found_value.get(f) for f in agree_on], sort_keys=True, default=repr)
                for found_value in found}
    if len(verdicts) > 1:
        raise ParseError(f"{len(found)} objects with {list(fields)} disagree ({', '.join(sorted(verdicts))[:120]}); "
                         f"a quoted caption may hold one, so none is taken")
    return found[-1], True


def extract_verdict_list(text: str | None, data: tuple[str, ...] = ()) -> tuple[list[str], bool]:
    """The judge's own list of strings (e.g. extracted events): the last top-level list of strings in the reply
    that is not copied from `data`; several that differ are refused like `extract_verdict` refuses disagreeing
    objects."""
    if text is None or not text.strip():
        raise ParseError("empty output")
    try:
        whole = json.loads(text)
        if isinstance(whole, list) and not repeats_data(text.strip(), data, whole):
            return whole, False
    except (ValueError, RecursionError):
        pass
    text, _ = strip_fenced(text)
    found, quoted = [], 0
    for span in _top_level_spans(text, "["):
        if repeats_data(span, data):
            quoted += 1
            continue
        try:
            value = _loads_lenient(span)
        except ParseError:
            continue
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            found.append(value)
    if not found:
        if quoted:
            raise ParseError("the only lists in the reply are quoted from the caption, not the judge's own answer")
        return extract_json(text, list)
    if any(v != found[-1] for v in found):
        raise ParseError(f"{len(found)} lists of strings in the reply disagree; a quoted caption may hold one, so "
                         f"none is taken")
    return found[-1], True


def parse_int_field(obj: dict, field: str, allowed: tuple[int, ...]) -> tuple[int, bool]:
    """An integer score from a JSON field: 2, "2", "2.0" or "-1" are accepted; "2 points" is a repair; text elsewhere
    in the object (e.g. an analysis mentioning 2) is never looked at."""
    if field not in obj:
        raise ParseError(f"JSON has no {field!r} field (keys: {sorted(obj)[:8]})")
    raw = obj[field]
    repaired = False
    if isinstance(raw, bool):
        raise ParseError(f"{field!r} is a boolean")
    if isinstance(raw, (int, float)) and float(raw).is_integer():
        value = int(raw)
    elif isinstance(raw, str):
        s = raw.strip()
        if re.fullmatch(r"[+-]?\d+(\.0+)?", s):
            value = int(float(s))
        else:
            m = re.fullmatch(r"\s*(?:score\s*[:=]?\s*)?([+-]?\d+)\b[^\d]*", s, flags=re.IGNORECASE)
            if not m:
                raise ParseError(f"{field!r} is not an integer: {raw!r}")
            value, repaired = int(m.group(1)), True
    else:
        raise ParseError(f"{field!r} is not an integer: {raw!r}")
    if value not in allowed:
        raise ParseError(f"{field!r}={value} not in {allowed}")
    return value, repaired


def match_choice(text: str | None, choices: tuple[str, ...]) -> tuple[str, bool]:
    """One of `choices` (case-insensitive) from text: exact first, then after stripping quotes/markdown/punctuation
    and a leading "answer:"; the first line only when trailing text follows. Anything else fails."""
    if text is None or not text.strip():
        raise ParseError("empty output")
    lowered = {c.lower(): c for c in choices}
    s = text.strip()
    if s in choices:
        return s, False
    for candidate in (s, s.splitlines()[0] if s.splitlines() else s):
        c = re.sub(r"^(?:the\s+)?(?:final\s+)?(?:answer|option|choice|label)\s*(?:is)?\s*[:：]?\s*", "", candidate.strip(),
                   flags=re.IGNORECASE)
        c = c.strip().strip("*`\"'").strip()
        c = re.sub(r"^\((.+)\)$", r"\1", c).strip()
        c = c.rstrip(".!;:,").strip().strip("*`\"'").strip()
        if c.lower() in lowered:
            return lowered[c.lower()], True
    raise ParseError(f"not one of {list(choices)}: {text[:60]!r}")
