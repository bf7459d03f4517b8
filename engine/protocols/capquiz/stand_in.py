"""CapQuiz's stand-in answers for the local judge (`JudgeProtocol.stand_in_answer`; engine/stand_in.py): the option
closest to a caption sentence (similarity plus half the word overlap), or "cannot be determined" when none stands
out. A plumbing check, not a model."""

from __future__ import annotations

import json

from capeval.engine.stand_in import StandIn, StandInRequest, TextSimilarity, compared_texts, overlap, sentences


def capquiz_reply(request: StandInRequest, emb: TextSimilarity) -> str:
    options = [str(o) for o in json.loads(request.fields.get("options") or "[]")]
    letters = list(request.choices or [chr(ord("A") + i) for i in range(len(options))])
    sents = sentences(request.fields.get("caption", ""))
    cannot = next((letters[i] for i, o in enumerate(options) if "cannot be determined" in o.lower()), None)
    scored = [(emb.max_sim(o, sents) + 0.5 * overlap(o, request.fields.get("caption", "")), letters[i])
              for i, o in enumerate(options) if "cannot be determined" not in o.lower() and i < len(letters)]
    if not scored:
        return cannot or letters[0]
    scored.sort(reverse=True)
    best, letter = scored[0]
    margin = best - (scored[1][0] if len(scored) > 1 else 0.0)
    if cannot is not None and (best < 0.45 or margin < 0.03):
        return cannot
    return letter


def stand_in(request: StandInRequest) -> StandIn:
    """The deferred reply to any `capquiz/...` request (answers and blind-solvability questions alike)."""
    return StandIn(texts=compared_texts(request.fields), reply=lambda similarity: capquiz_reply(request, similarity))
