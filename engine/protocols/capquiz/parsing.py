"""CapQuiz parsing: the judge's pick, as a bare letter ("B"), a letter with its text ("B. red", "(B) red"), the
option text itself ("red", "Cannot be determined"), or a letter after bounded repairs ("Answer: (b)", "**B.**").
A letter whose text names a different option, or anything else, is a parse failure (no verdict; counted).

Outcome (the paper's): the correct option -> CORRECT (TP); "Cannot be determined" -> CANNOT_DETERMINE (FN); any
other option -> WRONG (FP). The picked option is mapped back to its index in the given order (`original_option`)."""

from __future__ import annotations

import json
import re

from capeval.engine.replies.repair import ParseError, match_choice
from capeval.engine.protocols.base import RequestContext
from capeval.engine.schemas import NO_VERDICT, ParseStatus

from .codes import CapQuizVerdict
from .prompts import ALPHABET, CANNOT_DETERMINE_TEXT, LETTERS

_LETTER_WITH_TEXT = re.compile(r"^\(?\s*([A-Za-z])\s*[.):：]\s*(.+)$", re.DOTALL)


def _norm(text: str) -> str:
    return " ".join(text.strip().strip("*`\"'").strip().rstrip(".!").strip().lower().split())


def pick_letter(text: str | None, shown: list[str], letters: tuple[str, ...]) -> tuple[str, ParseStatus]:
    """The letter the reply picks among `letters` (shown[i] is the option at letters[i]); raises ParseError."""
    if text is None or not text.strip():
        raise ParseError("empty output")
    stripped = text.strip()
    if stripped in letters:
        return stripped, ParseStatus.OK
    by_text = {_norm(t): k for k, t in zip(letters, shown)}
    whole = _norm(stripped)
    if whole in by_text:  # the option text itself
        return by_text[whole], ParseStatus.REPAIRED
    m = _LETTER_WITH_TEXT.match(stripped)
    if m and m.group(1).upper() in letters and len(stripped.splitlines()) == 1:
        letter, rest = m.group(1).upper(), _norm(m.group(2))
        named = by_text.get(rest)
        if named is not None and named != letter:
            raise ParseError(f"letter {letter} and option text {m.group(2).strip()!r} (option {named}) disagree")
        return letter, ParseStatus.REPAIRED
    letter, _ = match_choice(text, letters)
    return letter.upper(), ParseStatus.REPAIRED


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    ctx = RequestContext.decode(request.get("context")).parse
    shown = ctx.get("shown") or [*([""] * len(LETTERS)), CANNOT_DETERMINE_TEXT]
    letters = tuple(ALPHABET[: len(shown)])
    cannot = ctx.get("cannot", letters[-1])
    try:
        letter, status = pick_letter(text, shown, letters)
    except ParseError as exc:
        return NO_VERDICT, ParseStatus.FAILED, str(exc)
    if letter == cannot:
        code = CapQuizVerdict.CANNOT_DETERMINE
    elif letter == ctx.get("correct"):
        code = CapQuizVerdict.CORRECT
    else:
        code = CapQuizVerdict.WRONG
    order = ctx.get("order") or []
    index = letters.index(letter)
    original = order[index] if index < len(order) else None
    return int(code), status, json.dumps({"letter": letter, "original_option": original})
