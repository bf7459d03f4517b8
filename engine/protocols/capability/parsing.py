"""CAPability reply parsing in the two modes; both return (verdict code, ParseStatus, detail JSON | error text).

official: exactly the official extraction and validation (official.py). A reply the official script would not save
    is FAILED (the judge loop re-asks it, as the official retry rounds do); the accepted score maps through
    official.code_of. dynamic_object_number is parsed one object per row here; the judge loop re-asks the whole
    item when one object's reply is rejected (official policy: rows of one item form a unit), and official-mode
    metrics count an item only when every object has a verdict (metrics.all_or_nothing).
strict (capeval's own): the reply may be JSON or a Python literal, fenced or inside prose (a lenient extraction,
    status REPAIRED when it was needed); then the official validation (strict_match off) so strict never accepts a
    value the official validator rejects, plus three rules of its own: a score must be a number or numeric text
    (not a boolean), `pred` must be a list or text (not a dict), and a list that mixes "N/A" with category names is
    contradictory and re-asked instead of silently becoming a miss.

The parse context (Rendered.parse, built by prompts.py) carries: mode, task, annotation (the object's {obj: value}
for the object tasks), strict_match, and for classification tasks the pack's category names and explanation lines.
"""

from __future__ import annotations

import json

from capeval.engine.replies.repair import ParseError, extract_verdict, repeats_data
from capeval.engine.replies.fences import data_texts
from capeval.engine.protocols.base import RequestContext
from capeval.engine.schemas import NO_VERDICT, ParseStatus

from . import official
from .codes import CLASSIFICATION_TASKS


#: json.dumps(detail, ensure_ascii=False) without building an encoder per call (dumps reuses one only for defaults).
_DETAIL_JSON = json.JSONEncoder(ensure_ascii=False)


def _categories(ctx: dict) -> official.Categories:
    return official.Categories(tuple(ctx.get("names") or ()), tuple(ctx.get("explains") or ()))


def _detail(reply, score) -> str:
    """The verdict's detail JSON. Only for a reply already found json_safe: then so is every value inside it."""
    detail = {"score": 1 if score == 1 else 0 if score == 0 else -1}
    if type(score) is not int:  # True, 1.0: what the official script stored
        detail["score_repr"] = repr(score)
    if isinstance(reply, dict):
        for k in ("pred", "reason"):
            if k in reply:
                detail[k] = reply[k]
    return _DETAIL_JSON.encode(detail)


def _validate(task: str, reply, ctx: dict):
    if task in CLASSIFICATION_TASKS:
        return official.validate_classification(task, reply, ctx.get("annotation"), _categories(ctx))
    return official.validate_scored(task, reply, ctx.get("annotation"), bool(ctx.get("strict_match")))


def parse_official(task: str, text: str | None, ctx: dict):
    try:
        reply, plain = official.read(text)
        score = _validate(task, reply, ctx)
        if not plain and not official.json_safe(reply):  # a plain reply came from json.loads
            raise official.Rejected("validate", "the reply holds values json cannot write")
    except official.Rejected as exc:
        return NO_VERDICT, ParseStatus.FAILED, f"rejected by the official rules at {exc}"
    return official.code_of(score), ParseStatus.OK, _detail(reply, score)


def _strict_extract(task: str, text: str | None, data: tuple[str, ...] = ()) -> tuple[object, bool, bool]:
    """(value, repaired, plain): the official extraction when the reply is one literal with no fence (`plain`: see
    official.read). A value the official extraction did read that is not a dict (a list, a tuple) is not searched
    further: officially it is rejected by the validator, and strict mode never accepts what the validator rejects.
    Otherwise (fences, prose, several objects) the judge's own object is looked for in the whole reply: a fence may
    hold a quoted caption's verdict as well as the judge's answer, so objects with a different score / pred make the
    reply ambiguous and it is re-asked, and an object copied from `data` (the caption, the annotation) is never the
    answer (repair.extract_verdict)."""
    try:
        value, plain = official.read(text)
        if not isinstance(value, dict) or ("```" not in text and not repeats_data(text.strip(), data, value)):
            return value, "```" in text, plain
    except official.Rejected as exc:
        if exc.stage == "api":
            raise
    try:
        fields = ("pred",) if task in CLASSIFICATION_TASKS else ("score",)
        return extract_verdict(text, fields, data=data)[0], True, False
    except ParseError as exc:
        raise official.Rejected("parse", str(exc)) from None


def parse_strict(task: str, text: str | None, ctx: dict, data: tuple[str, ...] = ()):
    try:
        reply, repaired, plain = _strict_extract(task, text, data)
        if not isinstance(reply, dict):
            raise official.Rejected("parse", f"expected a JSON object, got {type(reply).__name__}")
        if task in CLASSIFICATION_TASKS:
            pred = reply.get("pred")
            if not isinstance(pred, (list, str)):
                raise official.Rejected("validate", f"'pred' must be a list of categories, got {pred!r}")
            if isinstance(pred, list) and "N/A" in pred and any(p != "N/A" for p in pred):
                raise official.Rejected("validate", f"'pred' mixes N/A with categories: {pred!r}")
            repaired |= isinstance(pred, str) and pred.strip() != "N/A"  # a list written as text
        elif isinstance(reply.get("score"), bool):
            raise official.Rejected("validate", "'score' is a boolean, not 1, 0 or -1")
        score = _validate(task, reply, ctx)
        if not plain and not official.json_safe(reply):
            raise official.Rejected("validate", "the reply holds values json cannot write")
    except official.Rejected as exc:
        return NO_VERDICT, ParseStatus.FAILED, f"rejected: {exc}"
    return official.code_of(score), ParseStatus.REPAIRED if repaired else ParseStatus.OK, _detail(reply, score)


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    full = RequestContext.decode(request.get("context"))
    ctx = full.parse
    task = ctx.get("task") or request.get("task")
    if ctx.get("mode") == "official":
        return parse_official(task, text, ctx)
    return parse_strict(task, text, ctx, data_texts(full.fields))
