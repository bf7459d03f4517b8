"""Answer-position balancing (engine/construct/balance.py): every position is the answer equally often (give or
take one) for any set size, the order is seeded, and moving the answer keeps the distractors' order."""

from __future__ import annotations

from collections import Counter

import pytest

from capeval.engine.construct.balance import balanced_positions, place_answer


@pytest.mark.parametrize("n_items", [0, 1, 4, 5, 7, 23, 100, 1001])
@pytest.mark.parametrize("n_options", [2, 4, 5])
def test_each_position_equally_often(n_items, n_options):
    counts = Counter(balanced_positions(n_items, n_options, seed=3))
    assert sum(counts.values()) == n_items and set(counts) <= set(range(n_options))
    per_position = [counts.get(p, 0) for p in range(n_options)]
    assert max(per_position) - min(per_position) <= 1


def test_order_is_seeded_and_not_cyclic():
    a, b = balanced_positions(50, 5, seed=0), balanced_positions(50, 5, seed=1)
    assert a == balanced_positions(50, 5, seed=0) and a != b
    assert a != [k % 5 for k in range(50)]  # not A, B, C, D, E, A, ...: no pattern to learn from the order


def test_place_answer_moves_only_the_answer():
    options = ["red", "blue", "green", "white", "black"]
    for pos in range(5):
        moved = place_answer(options, "green", pos)
        assert moved[pos] == "green" and [o for o in moved if o != "green"] == ["red", "blue", "white", "black"]
    with pytest.raises(ValueError):
        place_answer(options, "pink", 0)
    with pytest.raises(ValueError):
        place_answer(options, "red", 5)
