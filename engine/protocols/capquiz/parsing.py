"""CapQuiz parsing: a strict single letter A-F (after bounded repairs), mapped back through the shuffle."""

from __future__ import annotations

import json
import re

from engine.judging.repair import ParseError, match_choice
from engine.protocols.base import parse_context
from engine.schemas import NO_VERDICT, ParseStatus

from .codes import CapQuizVerdict
from .prompts import CANNOT_DETERMINE_LETTER, CHOICES

_STRICT = re.compile(r"[A-F]")


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    ctx = parse_context(request).get("parse", {})
    stripped = (text or "").strip()
    if _STRICT.fullmatch(stripped):
        letter, status = stripped, ParseStatus.OK
    else:
        try:
            letter, _ = match_choice(text, CHOICES)
        except ParseError as exc:
            return NO_VERDICT, ParseStatus.FAILED, str(exc)
        if not _STRICT.fullmatch(letter):  # match_choice is case-insensitive; the letter must be upper-case
            letter = letter.upper()
        status = ParseStatus.REPAIRED
    if letter == CANNOT_DETERMINE_LETTER:
        code = CapQuizVerdict.CANNOT_DETERMINE
    elif letter == ctx.get("correct"):
        code = CapQuizVerdict.CORRECT
    else:
        code = CapQuizVerdict.WRONG
    order = ctx.get("order") or []
    original = order["ABCDE".index(letter)] if letter in "ABCDE" and order else None
    return int(code), status, json.dumps({"letter": letter, "original_option": original})
