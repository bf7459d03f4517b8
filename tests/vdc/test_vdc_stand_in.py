"""VDC's stand-in answers for the local judge: the answer step answers from the caption, the score step grades the
answer against the reference by word overlap and replies in the format its mode's parser reads (a Python dict
literal for the official prompt, the strict pack's JSON)."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Mapping

from capeval.engine.protocols.vdc.stand_in import NO_ANSWER, grade, stand_in

CAPTION = ("The video shows three objects on a navy background across 6 sampled frames: a green square in the top "
           "left that moves down; a red circle in the right that moves left; a red triangle in the center that "
           "stays still.")


@dataclass
class Request:
    task: str
    fields: Mapping[str, str]
    choices: tuple[str, ...] | None = None
    json_schema: str | None = None
    meta: Mapping[str, object] = field(default_factory=dict)


class Similarity:
    """Meaning similarity stand-in: a fixed score per text (the local judge's embeddings in production)."""

    def __init__(self, scores: dict[str, float] | None = None):
        self.scores = scores or {}

    def max_sim(self, a, bs):
        return max((self.scores.get(b, 0.0) for b in bs), default=0.0)

    def best(self, a, bs):
        sims = [self.scores.get(b, 0.0) for b in bs]
        return sims.index(max(sims)), max(sims)


def _answer(caption: str, question: str, similarity=None) -> str:
    answer = stand_in(Request("vdc/detailed/answer", {"caption": caption, "question": question}))
    assert set(answer.texts) >= {question}  # what the local judge embeds before replying
    return answer.reply(similarity or Similarity())


def test_the_answer_is_the_caption_sentence_sharing_most_words_with_the_question():
    assert _answer(CAPTION, "In which direction does the red circle move") == \
        "a red circle in the right that moves left"
    assert _answer(CAPTION, "What color is the background").startswith("The video shows three objects on a navy")
    # no word in common: the sentence closest in meaning, then the first
    tie = "Which one is bigger"
    assert _answer(CAPTION, tie, Similarity({"a red triangle in the center that stays still.": 0.9})) == \
        "a red triangle in the center that stays still."
    assert _answer(CAPTION, tie).startswith("The video shows")
    assert _answer("", "What is shown") == NO_ANSWER
    assert _answer(" \n ", "What is shown") == NO_ANSWER


def test_grading_by_the_share_of_reference_words_the_answer_says():
    assert grade("navy", "The video shows three objects on a navy background") == ("yes", 5)
    # 3 of the 4 content words (red, circle, left; "moving" is not "moves"): yes, 3.75 -> 4
    assert grade("a red circle moving left", "a red circle in the right that moves left") == ("yes", 4)
    # 2 of 5 (navy, background): under half, no
    assert grade("four moving shapes on a navy background", "three objects on a navy background") == ("no", 2)
    assert grade("no, the camera is static", "a green square that moves down") == ("no", 0)
    assert grade("environment", "") == ("no", 0)


def _score(reference: str, answer: str, schema: str | None) -> str:
    request = Request("vdc/camera/score", {"question": "q", "reference": reference, "answer": answer},
                      json_schema=schema)
    reply = stand_in(request)
    assert reply.texts == frozenset()  # graded by words: nothing to embed
    return reply.reply(Similarity())


def test_official_score_replies_are_the_python_dict_the_official_parser_reads():
    text = _score("navy", "a navy background", None)
    assert text == "{'pred': 'yes', 'score': 5}"
    parsed = ast.literal_eval(text)  # process_vdc_result.py: ast.literal_eval, float(score), pred == 'yes'
    assert parsed["pred"] == "yes" and float(parsed["score"]) == 5.0
    assert ast.literal_eval(_score("static", "a red circle", None)) == {"pred": "no", "score": 0}


def test_strict_score_replies_are_json_of_the_schema():
    schema = json.dumps({"type": "object", "properties": {"pred": {"type": "string", "enum": ["yes", "no"]},
                                                          "score": {"type": "integer", "minimum": 0, "maximum": 5}},
                         "required": ["pred", "score"]})
    for reference, answer in (("navy", "navy"), ("static", "moves"), ("a red circle", "a red square")):
        reply = json.loads(_score(reference, answer, schema))
        assert set(reply) == {"pred", "score"} and reply["pred"] in ("yes", "no")
        assert isinstance(reply["score"], int) and 0 <= reply["score"] <= 5


def test_other_steps_get_no_stand_in():
    assert stand_in(Request("vdc/short/extract", {"caption": CAPTION})) is None
    assert stand_in(Request("vdc", {})) is None
