"""VidCapBench prompts: step "answer" (answer the question from the caption only), then step "score" (score the
answer against the reference: 2 fully correct, 1 partially, 0 not answerable from the caption, -1 contradicts).
Repeated judge seeds run the whole chain once per seed (`trial`)."""

from __future__ import annotations

import json

from engine.protocols.base import Rendered

ANSWER_SYSTEM = (
    "You answer questions about a video using ONLY its caption. If the caption does not contain the information "
    "needed, say that the caption does not mention it. Answer briefly."
)
SCORE_SYSTEM = (
    "You grade an answer to a question about a video against the reference answer. Scores: 2 = the answer is fully "
    "correct; 1 = partially correct; 0 = the answer says the information is not available; -1 = the answer is wrong "
    "or contradicts the reference."
)
SCORE_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"analysis": {"type": "string", "maxLength": 400}, "score": {"type": "integer", "enum": [2, 1, 0, -1]}},
    "required": ["analysis", "score"],
})


def render(item: dict, caption: dict, *, seed: int, **_opts) -> list[Rendered]:
    question = item.get("annotation") or ""
    text = caption.get("text") or ""
    user = f"Caption:\n{text}\n\nQuestion: {question}\nAnswer:"
    return [Rendered(task=item["task"], step="answer", system=ANSWER_SYSTEM, user=user, max_tokens=128,
                     fields={"caption": text, "question": question},
                     parse={"question": question, "reference": item.get("answer") or ""})]


def render_score(task: str, question: str, reference: str, answer: str) -> Rendered:
    # Shared first: the grading instructions; then question and reference (shared by every captioner's answer to
    # this item); the answer under test last.
    user = (f"Question: {question}\nReference answer: {reference}\nAnswer to grade: {answer}\n"
            'Output only JSON: {"analysis": "brief comparison", "score": 2 or 1 or 0 or -1}')
    return Rendered(task=task, step="score", system=SCORE_SYSTEM, user=user, json_schema=SCORE_SCHEMA,
                    max_tokens=256, fields={"question": question, "reference": reference, "answer": answer},
                    parse={"answer": answer})
