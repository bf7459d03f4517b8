"""The synthetic (demo) dataset places each item's correct option by a seeded balanced permutation: every option
position is used equally often, the same for every run, and a judge that always answers "A" scores about chance
(it scored CapP = CapR = 100 when the answer was always the first option)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from capeval.engine.protocols.capquiz.dataset_kind import SIZE, capquiz_items
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, conform

COLORS = ("red", "green", "blue", "yellow")
SHAPES = ("circle", "square", "triangle")


def _truth(i: int) -> dict:
    shapes = [{"color": COLORS[(i + k) % 4], "shape": SHAPES[(i + k) % 3], "velocity": [30.0 * (-1) ** i, 5.0 * k]}
              for k in range(1 + i % 3)]
    return {"shapes": shapes, "n_shapes": len(shapes), "background": "gray"}


def _items(n_videos: int, seed: int = 0) -> list[dict]:
    rows = []
    for i in range(n_videos):
        rows += capquiz_items(f"v{i:03d}", f"/nowhere/v{i:03d}.mp4", _truth(i), SIZE, video_number=i, seed=seed)
    return rows


def test_answer_positions_are_balanced_and_deterministic():
    rows = _items(10)  # 40 items, 5 options each
    positions = Counter(r["options"].index(r["answer"]) for r in rows)
    assert positions == {p: 8 for p in range(5)}
    assert [r["options"] for r in _items(10)] == [r["options"] for r in rows]  # deterministic
    assert {tuple(r["options"]) for r in rows} != {tuple(r["options"]) for r in _items(10, seed=1)}  # seeded
    for r in rows:
        assert len(set(r["options"])) == 5 and r["answer"] in r["options"]


def test_a_judge_that_always_answers_a_scores_about_chance():
    rows = _items(10)
    items = conform(pa.Table.from_pylist(rows, schema=ITEMS), ITEMS)
    caps = conform(pa.table({"caption_key": [f"k{i}" for i in range(10)], "captioner": ["m"] * 10,
                             "prompt_id": ["p"] * 10, "frame_spec": ["f"] * 10,
                             "video_id": [f"v{i:03d}" for i in range(10)],
                             "text": ["Some shapes move over a gray background."] * 10}), CAPTIONS)
    p = lookup("protocol", "capquiz")
    reqs = p.build_requests(items, caps, judge="always-a", judge_revision="r", seeds=(0,))
    verdicts = [p.parse(r, "A")[0] for r in reqs.to_pylist()]
    from capeval.engine.protocols.capquiz.codes import CapQuizVerdict

    correct = sum(v == int(CapQuizVerdict.CORRECT) for v in verdicts)
    assert len(verdicts) == 40
    assert correct / len(verdicts) <= 0.3  # chance is 1/5 (1/6 with "cannot determine"); it was 1.0
