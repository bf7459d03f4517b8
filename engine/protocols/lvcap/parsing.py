"""LVCap-Eval parsing: yes/no answers and entailment labels must be one of the choices (after bounded repairs);
extracted events must be a JSON array of strings."""

from __future__ import annotations

import json

from engine.judging.repair import ParseError, extract_json, match_choice
from engine.protocols.base import parse_context
from engine.schemas import NO_VERDICT, ParseStatus

from .codes import EntailmentVerdict, SceneQAVerdict
from .prompts import ENTAIL_CHOICES, YES_NO

_ENTAIL = {"entailment": EntailmentVerdict.ENTAILMENT, "neutral": EntailmentVerdict.NEUTRAL,
           "contradiction": EntailmentVerdict.CONTRADICTION}


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    ctx = parse_context(request).get("parse", {})
    step = request.get("step")
    try:
        if step == "extract":
            events, repaired = extract_json(text, list)
            if not all(isinstance(e, str) for e in events):
                raise ParseError("extracted events must be strings")
            events = [e.strip() for e in events if e.strip()]
            return NO_VERDICT, ParseStatus.REPAIRED if repaired else ParseStatus.OK, json.dumps({"events": events})
        if step in ("entail_p", "entail_r"):
            label, repaired = match_choice(text, ENTAIL_CHOICES)
            code, detail = _ENTAIL[label], {"label": label, "event": ctx.get("event")}
        else:
            label, repaired = match_choice(text, YES_NO)
            code = SceneQAVerdict.CORRECT if label == ctx.get("answer") else SceneQAVerdict.WRONG
            detail = {"label": label}
    except ParseError as exc:
        return NO_VERDICT, ParseStatus.FAILED, str(exc)
    return int(code), ParseStatus.REPAIRED if repaired else ParseStatus.OK, json.dumps(detail, ensure_ascii=False)
