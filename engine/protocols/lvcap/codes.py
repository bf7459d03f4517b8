"""LVCap-Eval verdict codes: scene-level yes/no QA and event-level entailment (AutoDQ, both directions)."""
from enum import IntEnum


class SceneQAVerdict(IntEnum):
    WRONG = 0
    CORRECT = 1


class EntailmentVerdict(IntEnum):
    NEUTRAL = 0
    ENTAILMENT = 1  # only entailment counts as a matched event
    CONTRADICTION = 2


N_SCENE_CODES = len(SceneQAVerdict)
N_ENTAILMENT_CODES = len(EntailmentVerdict)


class BatchVerdict(IntEnum):
    """Official mode judges whole lists in one call: AutoDQ sends ONE entailment call per direction per clip (every
    event), LVCap's Prompt4 one call per video (every scene question). Such a row carries no per-event code: what
    the accepted reply says (relationships and hits, or correct answers per scene) is in the row's `detail` JSON; a
    reply the official rules reject leaves the row without a verdict."""

    JUDGED = 0
