"""VidCapBench parsing, per mode (the request context's `settings.mode`).

strict (capeval's own): the grade is the JSON `score` field (2 / 1 / 0 / -1; fenced, single-quoted and string
values repaired), never a digit found elsewhere in the reply. An analysis such as "the reference says 2 people ...
score -1" is -1 here.

official: the benchmark script's extraction, a substring cascade on the WHOLE reply: contains "2" -> score 2;
else "-1" -> -1; else "1" -> 1; else "0" -> 0; else no score (the pair is left out of every count). So "10 words"
reads as 1 and "2 people" as 2, whatever the score field says. The answer step's reply is kept unparsed (an empty
reply is still a reply); an answer reply with no content at all is stored by the official script as `pred` None and
judged as "Predicted Answer: None" (eval.py:83, 117), so official mode judges the text "None" (`OFFICIAL_NO_ANSWER`).
A judge-step reply with no content stops the official script (KeyError 'correctness'; see metrics.py)."""

from __future__ import annotations

import json

from capeval.engine.replies.repair import ParseError, extract_verdict, parse_int_field
from capeval.engine.replies.fences import data_texts
from capeval.engine.protocols.base import RequestContext
from capeval.engine.schemas import NO_VERDICT, ParseStatus

from .codes import from_score

#: The official cascade, in its order: the first substring found decides the score.
OFFICIAL_CASCADE = (("2", 2), ("-1", -1), ("1", 1), ("0", 0))


#: What the official judge prompt shows for an answer reply with no content: f"{None}".
OFFICIAL_NO_ANSWER = str(None)
#: How backends report a reply with no content (the judge loop records it as a backend error): the replay judge
#: ("recorded reply has no content") and the HTTP client ("completion without text content").
NO_CONTENT_MARKERS = ("has no content", "without text content")


def is_no_content(error: str | None) -> bool:
    """Whether a backend error says the reply had no content (as opposed to a timeout, an HTTP error, ...)."""
    return error is not None and any(m in error for m in NO_CONTENT_MARKERS)


def official_score(text: str | None) -> int | None:
    """The official script's score for a reply: the substring cascade, None when no digit of it occurs."""
    if text is None:
        return None
    for needle, score in OFFICIAL_CASCADE:
        if needle in text:
            return score
    return None


def official_counts_as_correct(text: str) -> bool:
    """The official test for a fully correct answer: a "2" anywhere in the reply."""
    return official_score(text) == 2


def parse_answer(text: str | None, mode: str = "strict") -> tuple[int, ParseStatus, str | None]:
    if text is None and mode == "official":
        return official_answer_without_content()
    if text is None:
        return NO_VERDICT, ParseStatus.FAILED, "answer step: reply has no content"
    if mode == "official":  # stored unparsed, as the official script stores `pred`
        return NO_VERDICT, ParseStatus.OK, json.dumps({"answer": text}, ensure_ascii=False)
    if not text.strip():
        return NO_VERDICT, ParseStatus.FAILED, "empty answer"
    return NO_VERDICT, ParseStatus.OK, json.dumps({"answer": text.strip()}, ensure_ascii=False)


def official_answer_without_content() -> tuple[int, ParseStatus, str]:
    """The official script's `pred` for an answer reply with no content: None, formatted into the judge prompt."""
    return NO_VERDICT, ParseStatus.OK, json.dumps(
        {"answer": OFFICIAL_NO_ANSWER, "note": "the answer reply had no content; the official script judges it as "
                                               "'Predicted Answer: None'"})


def parse_score(text: str | None, data: tuple[str, ...] = ()) -> tuple[int, ParseStatus, str | None]:
    """Strict: the JSON `score` field, and nothing else (a reply without one, even "Score: 1", has no verdict).
    `data`: the texts the prompt showed; an object quoted from them is never the grade (repair.extract_verdict)."""
    try:
        obj, repaired = extract_verdict(text, ("score",), data=data)  # the judge's own object, not a quoted one
        score, fixed = parse_int_field(obj, "score", (2, 1, 0, -1))
    except ParseError as exc:
        return NO_VERDICT, ParseStatus.FAILED, str(exc)
    status = ParseStatus.REPAIRED if (repaired or fixed) else ParseStatus.OK
    return int(from_score(score)), status, json.dumps({"score": score, "analysis": obj.get("analysis")},
                                                      ensure_ascii=False)


def parse_score_official(text: str | None) -> tuple[int, ParseStatus, str | None]:
    score = official_score(text)
    if score is None:
        why = "reply has no content" if text is None else "no score digit (2, -1, 1, 0) in the reply"
        return NO_VERDICT, ParseStatus.FAILED, f"official extraction: {why}"
    return int(from_score(score)), ParseStatus.OK, json.dumps({"score": score, "rule": "official substring"})


def parse(request: dict, text: str | None) -> tuple[int, ParseStatus, str | None]:
    full = RequestContext.decode(request.get("context"))
    ctx = full.parse
    mode = (ctx.get("settings") or {}).get("mode", "strict")
    if request.get("step") == "answer":
        return parse_answer(text, mode)
    if mode == "official":
        code, status, detail = parse_score_official(text)
    else:
        code, status, detail = parse_score(text, data_texts(full.fields))
    answer = ctx.get("answer")
    if status != ParseStatus.FAILED and answer is not None:
        detail = json.dumps({**json.loads(detail), "answer": answer}, ensure_ascii=False)
    return code, status, detail
