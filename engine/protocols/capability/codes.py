"""CAPability verdict codes.

The released judge outputs score 1 / 0 / −1; the official `evaluation/eval.py` counts 1 as correct, any non-zero
as a hit and 0 as a miss. For `action`, −1 means "the given action is not mentioned although other actions are"
and 0 "no action mentioned at all": the official metric still treats −1 as a (wrong) hit, so it maps to NEGATIVE.
Classification tasks (camera_angle, camera_movement, style) map a predicted list to POSITIVE when the annotation is
in it, MISS when it is ["N/A"], NEGATIVE otherwise.
"""
from enum import IntEnum


class CapabilityVerdict(IntEnum):
    MISS = 0
    POSITIVE = 1
    NEGATIVE = 2


class CapabilityQAVerdict(IntEnum):
    WRONG = 0
    CORRECT = 1


N_CODES = len(CapabilityVerdict)

#: released score → code
FROM_SCORE = {1: CapabilityVerdict.POSITIVE, 0: CapabilityVerdict.MISS, -1: CapabilityVerdict.NEGATIVE}

TASKS = (
    "object_category", "object_number", "object_color", "spatial_relation", "scene", "camera_angle", "OCR",
    "style", "character_identification", "dynamic_object_number", "action", "camera_movement", "event",
)
CLASSIFICATION_TASKS = ("camera_angle", "camera_movement", "style")
