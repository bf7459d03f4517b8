"""VDC's stand-in answers for the local judge (`JudgeProtocol.stand_in_answer`; engine/stand_in.py).

The answer step replies with the caption sentence that shares the most content words with the question (meaning
similarity breaks ties), as a short answer drawn from the caption alone. The score step grades that answer by the
share of the reference answer's content words it contains: `pred` "yes" from half of them, `score` that share on
0-5, written as the request's mode asks: a Python dict literal (`{'pred': 'yes', 'score': 4}`) for the official
prompt, which `ast.literal_eval` reads, or the JSON object of the strict pack's schema when the request carries one.
A plumbing check, not a model."""

from __future__ import annotations

import json

from capeval.engine.stand_in import StandIn, StandInRequest, TextSimilarity, compared_texts, overlap, sentences, task_parts

#: the answer when the caption has no sentence to answer from
NO_ANSWER = "The caption does not say."
#: share of the reference's content words the answer must contain for `pred` "yes"
YES_SHARE = 0.5


def answer_from_caption(caption: str, question: str, similarity: TextSimilarity) -> str:
    """The caption sentence (or clause: engine/stand_in.sentences splits at ';' too) sharing the most content words
    with the question; among equals, the one closest in meaning (then the first)."""
    candidates = [s for s in sentences(caption) if s.strip()]
    if not candidates:
        return NO_ANSWER
    best = max(range(len(candidates)),
               key=lambda i: (overlap(question, candidates[i]), similarity.max_sim(question, [candidates[i]]), -i))
    return candidates[best].strip().rstrip(";,")  # a clause of a longer sentence, not its separator


def grade(reference: str, answer: str) -> tuple[str, int]:
    """(pred, score): how much of the reference answer the predicted answer says."""
    share = overlap(reference, answer) if answer.strip() else 0.0
    return ("yes" if share >= YES_SHARE else "no"), round(5 * share)


def score_reply(fields, strict: bool) -> str:
    pred, score = grade(fields.get("reference", ""), fields.get("answer", ""))
    if strict:
        return json.dumps({"pred": pred, "score": score})
    return repr({"pred": pred, "score": score})  # the official prompt asks for a Python dictionary string


def stand_in(request: StandInRequest) -> StandIn | None:
    """The deferred reply to a `vdc/<kind>/answer` or `vdc/<kind>/score` request; None for any other step."""
    step = task_parts(request)[2]
    fields = request.fields
    if step == "answer":
        return StandIn(texts=compared_texts(fields), reply=lambda similarity: answer_from_caption(
            fields.get("caption", ""), fields.get("question", ""), similarity))
    if step == "score":  # graded by words alone: no text to compare by meaning
        strict = request.json_schema is not None
        return StandIn(texts=frozenset(), reply=lambda similarity: score_reply(fields, strict))
    return None
