"""VC-Inspector verdict codes: a multimodal judge scores video + caption from 1 to 5; code = score − 1."""
from enum import IntEnum


class VCInspectorVerdict(IntEnum):
    SCORE_1 = 0
    SCORE_2 = 1
    SCORE_3 = 2
    SCORE_4 = 3
    SCORE_5 = 4


N_CODES = len(VCInspectorVerdict)


def from_score(score: int) -> VCInspectorVerdict:
    if score not in (1, 2, 3, 4, 5):
        raise ValueError(f"VC-Inspector score must be an integer 1-5; got {score!r}")
    return VCInspectorVerdict(score - 1)
