"""Repairs for malformed judge output: fence stripping, trailing text, quote fixes, Python-literal JSON.

Each extractor returns (value, repaired) where `repaired` says whether anything beyond whitespace had to be fixed
(the verdict row then gets ParseStatus.REPAIRED), or raises `ParseError` naming what was wrong; the runner re-asks
a bounded number of times and finally keeps an explicit FAILED row.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

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


def _balanced_span(text: str, opener: str) -> str | None:
    """The first balanced {...} or [...] span, skipping brackets inside string literals."""
    closer = "}" if opener == "{" else "]"
    start = text.find(opener)
    while start != -1:
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
                    return text[start : i + 1]
        start = text.find(opener, start + 1)
    return None


def _loads_lenient(span: str) -> Any:
    for candidate in (span, span.translate(_SMART_QUOTES), _TRAILING_COMMA.sub(r"\1", span.translate(_SMART_QUOTES))):
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):  # JSONDecodeError, and an integer over Python's 4,300-digit limit
            pass
        try:  # single-quoted dicts, as the official CAPability script accepts via ast.literal_eval
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
