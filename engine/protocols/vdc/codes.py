"""VDC verdict codes of the score step: whether the judge says the answer drawn from the caption matches the
reference answer (`pred`). The 0-5 `score` travels in the row's `detail` (parsing.py), as it is not a code."""

from enum import IntEnum


class VDCVerdict(IntEnum):
    NO = 0  # pred is not 'yes' (official mode: anything but the exact string 'yes')
    YES = 1  # pred == 'yes'


N_CODES = len(VDCVerdict)
