"""What a protocol's stand-in answers are made of: the local judge (adapters/local_judge.py) answers every request
by asking the request's protocol (`JudgeProtocol.stand_in_answer`), and each protocol writes its reply from the
pieces here.

It lives below both: the protocols (which must not import a backend) and the local judge (which names no protocol)
share the request's shape (`StandInRequest`), the meaning-similarity the judge hands over (`TextSimilarity`, the
judge's sentence embeddings), the deferred answer a protocol returns (`StandIn`), and the word-level text measures:
sentences, content words, word overlap with crude stemming, negation words, and picking a label among a request's
choices. Like the local judge itself these are a plumbing check, not a model."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

STOP = set("a an the of in on at to is are was were be and or with by for from its it this that as his her their "
           "there which who while into onto over under near".split())
NEGATIONS = {"no", "not", "without", "never", "none", "nobody", "nothing", "neither", "nor"}
#: request fields whose text a reply compares by meaning (besides the caption's sentences and the options)
COMPARED_FIELDS = ("annotation", "question", "reference", "answer", "event")


class StandInRequest(Protocol):
    """The parts of a judge request (capeval.adapters.base.JudgeRequest) a stand-in answer reads."""

    task: str  # "<protocol>/<task>/<step>"
    fields: Mapping[str, str]
    choices: tuple[str, ...] | None
    json_schema: str | None
    meta: Mapping[str, object]


class TextSimilarity(Protocol):
    """Meaning similarity of short texts (cosine of unit-norm sentence embeddings), as the local judge provides it."""

    def max_sim(self, a: str, bs: Sequence[str]) -> float:
        """The highest similarity of `a` to any of `bs` (0.0 when `bs` is empty)."""

    def best(self, a: str, bs: Sequence[str]) -> tuple[int, float]:
        """(index, similarity) of the text of `bs` most similar to `a`."""


@dataclass(frozen=True)
class StandIn:
    """A protocol's stand-in answer to one request, deferred: `texts` are the texts `reply` compares by meaning (the
    local judge embeds those of a whole batch in one call before any reply is written), `reply(similarity)` is the
    reply text in the format the protocol's parser reads."""

    texts: frozenset[str]
    reply: Callable[[TextSimilarity], str]


def compared_texts(fields: Mapping[str, str]) -> frozenset[str]:
    """The texts a reply compares by meaning: the caption's sentences, the `COMPARED_FIELDS` and the options."""
    texts = set(sentences(fields.get("caption", "")))
    texts.update(fields[k] for k in COMPARED_FIELDS if fields.get(k))
    texts.update(str(o) for o in json.loads(fields.get("options") or "[]"))
    return frozenset(texts)


def task_parts(request: StandInRequest) -> tuple[str, str, str]:
    """(protocol, task, step) of the request's "<protocol>/<task>/<step>" (missing parts empty)."""
    protocol, task, step = (request.task.split("/") + ["", "", ""])[:3]
    return protocol, task, step


def sentences(text: str) -> list[str]:
    parts = [p.strip() for p in re.split(r"(?<=[.!?;])\s+|\n+", text or "") if p.strip()]
    return parts or [text or ""]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", (text or "").lower())


def stem(w: str) -> str:
    return w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w


def overlap(needle: str, hay: str) -> float:
    """Fraction of the needle's content words that occur in the haystack (crude stemming)."""
    n = {stem(w) for w in words(needle) if w not in STOP}
    if not n:
        return 0.0
    return len(n & {stem(w) for w in words(hay)}) / len(n)


def pick(choices: Sequence[str] | None, label: str) -> str:
    if not choices:
        return label
    for c in choices:
        if c.lower() == label:
            return c
    return choices[0]
