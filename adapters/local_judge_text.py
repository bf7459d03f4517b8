"""The local judge's text measures, shared by its general answerer (local_judge.py) and its LVCap-Eval answerer
(local_judge_lvcap.py): sentences, content words, word overlap with crude stemming, negation words, and picking a
label among a request's choices."""

from __future__ import annotations

import re
from typing import Sequence

STOP = set("a an the of in on at to is are was were be and or with by for from its it this that as his her their "
           "there which who while into onto over under near".split())
NEGATIONS = {"no", "not", "without", "never", "none", "nobody", "nothing", "neither", "nor"}


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
