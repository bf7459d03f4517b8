"""VidCapBench verdict codes: the judge answers a question from the caption, then scores it 2 / 1 / 0 / −1.

code = score + 1, so codes stay small non-negative integers and the score is recoverable.
"""
from enum import IntEnum


class VidCapBenchVerdict(IntEnum):
    INCORRECT = 0  # score −1: the caption's information contradicts the reference answer
    NOT_MENTIONED = 1  # score 0: the caption does not let the question be answered
    PARTIAL = 2  # score 1: partially correct
    CORRECT = 3  # score 2: fully correct


N_CODES = len(VidCapBenchVerdict)


def from_score(score: int) -> VidCapBenchVerdict:
    if score not in (-1, 0, 1, 2):
        raise ValueError(f"VidCapBench score must be one of 2, 1, 0, -1; got {score!r}")
    return VidCapBenchVerdict(score + 1)
