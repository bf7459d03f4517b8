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
