"""Answer-position balancing: where the correct option of each multiple-choice item goes, so that every position is
the answer equally often over the whole set (counts differ by at most one), in a seeded order.

Why: a generator tends to put the answer in the same few places; a model that learned "the answer is usually B"
would score on position alone; a benchmark built this way can report its answer positions as uniform."""

from __future__ import annotations

import random

from capeval.engine.keys import derived_seed


def balanced_positions(n_items: int, n_options: int, seed: int = 0) -> list[int]:
    """A position (0-based) per item: each of the n_options positions floor(n/k) or ceil(n/k) times, in an order
    drawn from `seed` (the same on every machine)."""
    if n_options < 1:
        raise ValueError(f"n_options must be at least 1, got {n_options}")
    positions = [k % n_options for k in range(n_items)]
    random.Random(derived_seed("construct", "answer-positions", int(seed), int(n_items), int(n_options))).shuffle(
        positions)
    return positions


def place_answer(options: list[str], answer: str, position: int) -> list[str]:
    """`options` with `answer` moved to `position`; the distractors keep their relative order."""
    if answer not in options:
        raise ValueError(f"answer {answer!r} is not one of the options {options}")
    if not 0 <= position < len(options):
        raise ValueError(f"position {position} outside the {len(options)} options")
    rest = [o for o in options if o != answer]
    return rest[:position] + [answer] + rest[position:]
