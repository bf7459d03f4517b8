"""VC-Inspector parsing: the integer `score` field (1-5) of a JSON object -> code score-1; explanation kept."""

from __future__ import annotations

import json

from engine.judging.repair import ParseError, extract_json, parse_int_field
from engine.schemas import NO_VERDICT, ParseStatus

from .codes import from_score


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    try:
        obj, repaired = extract_json(text, dict)
        score, fixed = parse_int_field(obj, "score", (1, 2, 3, 4, 5))
    except ParseError as exc:
        return NO_VERDICT, ParseStatus.FAILED, str(exc)
    status = ParseStatus.REPAIRED if (repaired or fixed) else ParseStatus.OK
    return int(from_score(score)), status, json.dumps({"score": score, "explanation": obj.get("explanation")},
                                                      ensure_ascii=False)
