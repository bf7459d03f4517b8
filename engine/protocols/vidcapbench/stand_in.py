"""VidCapBench's stand-in answers for the local judge (`JudgeProtocol.stand_in_answer`; engine/stand_in.py): the
answer step replies with the caption sentence closest to the question, the score step grades the answer by its
similarity and word overlap to the reference. A plumbing check, not a model."""

from __future__ import annotations

import json

from capeval.engine.stand_in import StandIn, StandInRequest, TextSimilarity, compared_texts, overlap, sentences, task_parts


def _answer(fields, emb: TextSimilarity) -> str:
    caption = fields.get("caption", "")
    i, _ = emb.best(fields["question"], sentences(caption))
    return sentences(caption)[i]


def _score(fields, emb: TextSimilarity) -> str:
    sim = emb.max_sim(fields["reference"], [fields["answer"]]) if fields.get("answer") else 0.0
    ov = overlap(fields["reference"], fields.get("answer", ""))
    s = max(sim, ov)
    score = 2 if s >= 0.75 else 1 if s >= 0.5 else 0 if s >= 0.25 else -1
    return json.dumps({"score": score, "analysis": f"similarity {sim:.2f}, overlap {ov:.2f}"})


def stand_in(request: StandInRequest) -> StandIn | None:
    """The deferred reply to a `vidcapbench/<task>/answer` or `.../score` request; None for any other step."""
    reply = {"answer": _answer, "score": _score}.get(task_parts(request)[2])
    if reply is None:
        return None
    f = request.fields
    return StandIn(texts=compared_texts(f), reply=lambda similarity: reply(f, similarity))
