"""VidCapBench parsing. The score comes from the JSON `score` field only. The official script tests whether "2"
occurs anywhere in the output text, so an analysis such as "the reference says 2 people ... score -1" counts as
fully correct there; here it is -1 (tests/judging/test_judging_parsing.py shows the difference)."""

from __future__ import annotations

import json
import re

from engine.judging.repair import ParseError, extract_json, parse_int_field
from engine.protocols.base import parse_context
from engine.schemas import NO_VERDICT, ParseStatus

from .codes import from_score

_SCORE_ONLY = re.compile(r"\s*(?:score\s*[:=]\s*)?([+-]?[012]|-1)\s*\.?\s*", re.IGNORECASE)


def parse_answer(text: str | None) -> tuple[int, ParseStatus, str | None]:
    if text is None or not text.strip():
        return NO_VERDICT, ParseStatus.FAILED, "empty answer"
    return NO_VERDICT, ParseStatus.OK, json.dumps({"answer": text.strip()}, ensure_ascii=False)


def parse_score(text: str | None) -> tuple[int, ParseStatus, str | None]:
    try:
        try:
            obj, repaired = extract_json(text, dict)
        except ParseError:
            m = _SCORE_ONLY.fullmatch(text or "")  # a bare "score: 1" with no JSON at all
            if not m:
                raise
            obj, repaired = {"score": int(m.group(1)), "analysis": None}, True
        score, fixed = parse_int_field(obj, "score", (2, 1, 0, -1))
    except ParseError as exc:
        return NO_VERDICT, ParseStatus.FAILED, str(exc)
    status = ParseStatus.REPAIRED if (repaired or fixed) else ParseStatus.OK
    return int(from_score(score)), status, json.dumps({"score": score, "analysis": obj.get("analysis")},
                                                      ensure_ascii=False)


def official_counts_as_correct(text: str) -> bool:
    """The official script's test (kept to document the difference; not used for verdicts): a "2" anywhere."""
    return "2" in text


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    if request.get("step") == "answer":
        return parse_answer(text)
    code, status, detail = parse_score(text)
    answer = parse_context(request).get("parse", {}).get("answer")
    if status != ParseStatus.FAILED and answer is not None:
        detail = json.dumps({**json.loads(detail), "answer": answer}, ensure_ascii=False)
    return code, status, detail
