"""CapQuiz prompts: the judge answers a 5-option question from the caption alone, with "Cannot be determined" as F.

Options are shuffled per question by a seed derived from the item id (engine.keys.derived_seed), so the order is the
same in every run, on every machine and whatever order items arrive in; F always stays "Cannot be determined".
"""

from __future__ import annotations

import json
import random

from engine.keys import derived_seed
from engine.protocols.base import Rendered

LETTERS = ("A", "B", "C", "D", "E")
CANNOT_DETERMINE_LETTER = "F"
CANNOT_DETERMINE_TEXT = "Cannot be determined"
CHOICES = LETTERS + (CANNOT_DETERMINE_LETTER,)

SYSTEM = (
    "You are given a description (caption) of a video and a multiple-choice question about the video. "
    "Answer using ONLY the information in the caption; do not guess from common sense. If the caption does not "
    f"contain enough information to choose an option, answer {CANNOT_DETERMINE_LETTER} ({CANNOT_DETERMINE_TEXT}). "
    "Reply with a single capital letter and nothing else."
)


def shuffle_order(item_id: str, n: int = len(LETTERS)) -> list[int]:
    """order[i] = index (in the item's original option list) of the option shown at letter i."""
    order = list(range(n))
    random.Random(derived_seed("capquiz", "option-shuffle", item_id)).shuffle(order)
    return order


def correct_index(item: dict) -> int:
    """The correct option's index in the original list: `answer` is the option text or its letter (A-E)."""
    options, answer = list(item.get("options") or []), item.get("answer")
    if answer in options:
        return options.index(answer)
    if isinstance(answer, str) and answer.strip().upper() in LETTERS[: len(options)]:
        return LETTERS.index(answer.strip().upper())
    raise ValueError(f"capquiz item {item.get('item_id')!r}: answer {answer!r} is neither an option nor a letter")


def render(item: dict, caption: dict, *, seed: int, **_opts) -> list[Rendered]:
    options = list(item.get("options") or [])
    if len(options) != len(LETTERS):
        raise ValueError(f"capquiz item {item['item_id']!r}: expected {len(LETTERS)} options, got {len(options)}")
    order = shuffle_order(item["item_id"])
    shown = [options[i] for i in order] + [CANNOT_DETERMINE_TEXT]
    correct_letter = LETTERS[order.index(correct_index(item))]
    question = item.get("annotation") or ""
    lines = "\n".join(f"{letter}. {text}" for letter, text in zip(CHOICES, shown))
    user = (
        f"Caption:\n{caption.get('text') or ''}\n\n"  # shared prefix: every question about this caption reuses it
        f"Question: {question}\nOptions:\n{lines}\nAnswer with one letter:"
    )
    return [Rendered(
        task=item["task"], step="answer", system=SYSTEM, user=user, choices=CHOICES, max_tokens=8,
        fields={"caption": caption.get("text") or "", "question": question, "options": json.dumps(shown)},
        parse={"correct": correct_letter, "order": order},
    )]
