"""VC-Inspector's stand-in answers for the local judge (`JudgeProtocol.stand_in_answer`; engine/stand_in.py): a 1-5
score from the caption's similarity to the reference (3 without a reference: the local judge cannot see the video).
A plumbing check, not a model."""

from __future__ import annotations

import json

import numpy as np

from capeval.engine.stand_in import StandIn, StandInRequest, TextSimilarity, compared_texts, sentences


def vcinspector_reply(fields, emb: TextSimilarity) -> str:
    if not fields.get("reference"):
        return json.dumps({"score": 3, "explanation": "no reference given; the local judge cannot see video"})
    sim = emb.max_sim(fields["reference"], sentences(fields.get("caption", "")))
    score = int(np.clip(1 + round(sim * 5), 1, 5))
    return json.dumps({"score": score, "explanation": f"caption-reference similarity {sim:.2f}"})


def stand_in(request: StandInRequest) -> StandIn:
    """The deferred reply to any `vcinspector/...` request (evaluation and construction steps alike)."""
    f = request.fields
    return StandIn(texts=compared_texts(f), reply=lambda similarity: vcinspector_reply(f, similarity))
