"""VC-Inspector parsing.

strict mode: the integer `score` field (1-5) of the judge's own JSON object -> code score-1; explanation kept. A reply
    that also quotes an object with a different score (e.g. from the caption) is refused (repair.extract_verdict).
official mode: the released checkpoints answer "<score>\\n<explanation>" (the repository prints the raw text and has
no parser): the first non-empty line must be one integer 1-5 (surrounding spaces allowed); the remaining lines are
the explanation. Anything else (a JSON object, "Score: 4", "4/5") is a failure, never guessed."""

from __future__ import annotations

import json
import re

from capeval.engine.replies.repair import ParseError, extract_verdict, parse_int_field
from capeval.engine.replies.fences import data_texts
from capeval.engine.protocols.base import RequestContext
from capeval.engine.schemas import NO_VERDICT, ParseStatus

from .codes import from_score

_FIRST_LINE = re.compile(r"\s*([1-5])\s*")


def parse_official(text: str | None) -> tuple[int, str]:
    if text is None or not text.strip():
        raise ParseError("empty output")
    lines = text.strip().splitlines()
    m = _FIRST_LINE.fullmatch(lines[0])
    if not m:
        raise ParseError(f"first line is not a single integer 1-5: {lines[0][:60]!r}")
    return int(m.group(1)), "\n".join(lines[1:]).strip()


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    ctx = RequestContext.decode(request.get("context"))
    official = ctx.parse.get("mode") == "official"
    try:
        if official:
            score, explanation = parse_official(text)
            status = ParseStatus.OK
        else:
            obj, repaired = extract_verdict(text, ("score",), data=data_texts(ctx.fields))
            score, fixed = parse_int_field(obj, "score", (1, 2, 3, 4, 5))
            explanation = obj.get("explanation")
            status = ParseStatus.REPAIRED if (repaired or fixed) else ParseStatus.OK
    except ParseError as exc:
        return NO_VERDICT, ParseStatus.FAILED, str(exc)
    return int(from_score(score)), status, json.dumps({"score": score, "explanation": explanation},
                                                      ensure_ascii=False)
