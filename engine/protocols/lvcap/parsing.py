"""LVCap-Eval parsing.

strict mode: yes/no answers and entailment labels must be one of the choices (after bounded repairs); extracted
events must be a JSON array of strings.
official mode: AutoDQ's acceptance rules (autodq.py) for steps extract / recall / precision, and Prompt4's JSON line
(scores per scene) for step scene_qa."""

from __future__ import annotations

import json

from capeval.engine.replies.repair import ParseError, extract_json, extract_verdict_list, match_choice
from capeval.engine.replies.fences import data_texts
from capeval.engine.protocols.base import RequestContext
from capeval.engine.schemas import NO_VERDICT, ParseStatus

from . import autodq, paper_events
from .codes import BatchVerdict, EntailmentVerdict, SceneQAVerdict
from .prompts import ENTAIL_CHOICES, YES_NO

_ENTAIL = {"entailment": EntailmentVerdict.ENTAILMENT, "neutral": EntailmentVerdict.NEUTRAL,
           "contradiction": EntailmentVerdict.CONTRADICTION}
OFFICIAL_STEPS = ("recall", "precision", "scene_qa")


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    context = RequestContext.decode(request.get("context"))
    ctx = context.parse
    step = request.get("step")
    try:
        if ctx.get("event_scoring") == "paper":  # the paper's Prompt2 / Prompt5 (paper_events.py)
            return paper_events.parse_reply(step, text, ctx)
        if step == "extract" and ctx.get("mode") == "official":
            events = autodq.parse_extract(text)
            return NO_VERDICT, ParseStatus.OK, json.dumps({"events": events, "events_repr": str(events)},
                                                          ensure_ascii=False, default=repr)
        if step in ("recall", "precision"):
            detail = autodq.parse_entailment(text, int(ctx["n_events"]))
            return int(BatchVerdict.JUDGED), ParseStatus.OK, json.dumps(detail, ensure_ascii=False)
        if step == "scene_qa":
            return int(BatchVerdict.JUDGED), ParseStatus.OK, json.dumps(parse_scene_scores(text, ctx))
        if step == "extract":
            # the judge's own list, not one quoted from the caption
            events, repaired = extract_verdict_list(text, data_texts(context.fields))
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


def parse_scene_scores(text: str | None, ctx: dict) -> dict:
    """Prompt4's reply: a JSON line with `scores` (correct answers per scene, in scene order). The paper publishes no
    parser; capeval takes the last line that holds a JSON object, requires one integer per scene within
    0..questions of that scene, and recomputes the score from the counts (the judge's own total_score is kept as
    `total_score_reported`)."""
    per_scene = [int(n) for n in ctx["questions_per_scene"]]
    if text is None or not text.strip():
        raise ParseError("empty output")
    obj = None
    for line in reversed(text.strip().splitlines()):
        if "{" in line:
            try:
                obj, _ = extract_json(line, dict)
                break
            except ParseError:
                continue
    if obj is None:
        obj, _ = extract_json(text, dict)
    scores = obj.get("scores")
    if not isinstance(scores, list) or len(scores) != len(per_scene):
        raise ParseError(f"'scores' must list {len(per_scene)} per-scene counts, got {scores!r}"[:200])
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= n for s, n in zip(scores, per_scene)):
        raise ParseError(f"'scores' {scores} must be integers within the questions per scene {per_scene}")
    correct, total = sum(scores), sum(per_scene)
    return {"scores": scores, "correct": correct, "questions": total, "score": 100.0 * correct / total if total else None,
            "total_score_reported": obj.get("total_score")}
