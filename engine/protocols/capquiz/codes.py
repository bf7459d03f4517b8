"""CapQuiz verdict codes: the judge answers a 5-option question (+ "Cannot be determined") from the caption."""
from enum import IntEnum


class CapQuizVerdict(IntEnum):
    CANNOT_DETERMINE = 0  # FN: the caption does not let the judge answer
    CORRECT = 1  # TP
    WRONG = 2  # FP


N_CODES = len(CapQuizVerdict)
