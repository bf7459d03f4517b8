"""CAPability-QA questions from real annotations of the shared release: deterministic, well formed (the answer is
among the options and means the annotation), multiple choice and open as the paper divides them; the letter parser
reads what it documents and refuses what it cannot read."""

from __future__ import annotations

import json
import re

import pyarrow.compute as pc
import pytest

from capeval.engine.protocols.capability.codes import TASKS
from capeval.engine.protocols.capability.qa import OPEN_TASKS, build_questions, parse_choice, questions_from_table, \
    questions_table
from capeval.engine.protocols.capability.release import load_items

PER_TASK = 12


@pytest.fixture(scope="module")
def items(shared_data):
    table = load_items(shared_data / "capability" / "annotations")
    keep = []
    for task in TASKS:  # the first PER_TASK items of every task file
        idx = pc.indices_nonzero(pc.equal(table.column("task"), task)).to_pylist()[:PER_TASK]
        keep += idx
    return table.take(keep)


def test_questions_are_deterministic_and_depend_on_the_seed(items):
    a, b = build_questions(items, seed=0), build_questions(items, seed=0)
    assert a == b
    assert questions_from_table(questions_table(a)) == a
    c = build_questions(items, seed=1)
    counts = [(x.options, y.options) for x, y in zip(a, c) if x.task == "object_number"]
    assert any(x != y for x, y in counts)  # another seed draws other distractors or positions
    assert [q.qa_id for q in a] != [q.qa_id for q in c]


def test_questions_are_well_formed(items):
    questions = build_questions(items)
    annotations = {(r["task"], r["item_id"]): r["annotation"] for r in items.to_pylist()}
    n_dyn_objects = sum(len(json.loads(a)) for (t, _), a in annotations.items() if t == "dynamic_object_number")
    assert len(questions) == items.num_rows - PER_TASK + n_dyn_objects
    assert len({q.qa_id for q in questions}) == len(questions)
    assert {q.task for q in questions} == set(TASKS)
    for q in questions:
        anno = annotations[(q.task, q.item_id)]
        assert q.kind == ("open" if q.task in OPEN_TASKS else "choice")
        if q.kind == "open":
            assert q.options is None and q.answer == q.answer_text
            expected = next(iter(json.loads(anno).values())) if q.task == "object_color" else anno
            assert q.answer_text == expected
            assert q.prompt.startswith(q.question) and not re.search(r"^A\. ", q.prompt, re.M)
            continue
        letters = "ABCD"[:len(q.options)]
        assert len(set(q.options)) == len(q.options) and q.answer in letters
        assert q.options[letters.index(q.answer)] == q.answer_text
        for letter, option in zip(letters, q.options):
            assert f"\n{letter}. {option}\n" in q.prompt + "\n"
        if q.task in ("object_category", "scene", "spatial_relation", "action", "event"):
            assert q.options == ["Yes", "No", "Can't tell"] and q.answer == "A"
            assert f'"{anno}"' in q.question or anno in q.question
        elif q.task in ("object_number", "dynamic_object_number"):
            name, n = list(json.loads(anno).items())[q.sub_index or 0]
            assert q.answer_text == str(n) and f'"{name}"' in q.question and len(q.options) == 4
            assert all(int(o) > 0 for o in q.options)
        else:  # categories: the annotation and three others, in the list's order
            assert q.answer_text == anno and len(q.options) == 4
        assert (q.sub_index is not None) == (q.task == "dynamic_object_number")


def test_media_words_follow_the_item(items):
    for q in build_questions(items):
        if q.task in ("scene", "camera_movement", "event"):
            assert ("video" in q.question) == (q.media_type == "video")


@pytest.mark.parametrize("reply, picked", [
    ("A", "A"), ("(B)", "B"), ("**C.**", "C"), ("B. No", "B"), ("Answer: C", "C"), ("The answer is A.", "A"),
    ("I looked closely, so the answer is B", "B"), ("can't tell", "C"), ("No, there is none.", "B"),
    ("A cat sits on a mat.", None), ("Yes and no", None), ("", None), (None, None), ("E", None),
])
def test_letter_parser(reply, picked):
    got, how = parse_choice(reply, ["Yes", "No", "Can't tell"])
    assert got == picked, how


def test_local_captioner_answers_questions_from_its_caption():
    """The plumbing captioner answers a question from what its pixel statistics describe (no script given)."""
    import numpy as np

    from capeval.adapters.base import CaptionRequest
    from capeval.adapters.local_captioner import LocalCaptioner
    from capeval.engine.protocols.capability.qa import Question, render_prompt

    frames = np.full((2, 64, 64, 3), 245, np.uint8)
    frames[:, 20:44, 20:44] = (220, 30, 30)  # a red square in the middle, still

    def ask(question: str, options):
        q = Question("id", "t", "i", None, "v", None, "video", "choice" if options else "open", question, options,
                     "", "", render_prompt(question, options))
        (r,) = LocalCaptioner().caption([CaptionRequest("k", q.prompt, frames, question=q.backend_fields())])
        assert r.error is None
        return r.text

    yes_no = ["Yes", "No", "Can't tell"]
    assert ask('Does the object "red square" appear in the video?', yes_no) == "A"
    assert ask('Does the object "blue circle" appear in the video?', yes_no) == "B"
    assert ask('How many "square" are there in the video?', ["3", "1", "2", "4"]) == "B"
    assert "red" in ask('What is the color of the object "square" in the video?', None)
