"""Grading CAPability-QA answers: multiple choice by the letter parser (qa.parse_choice), open answers by a judge.

Neither the paper nor the official code says how the open answers (object_color, OCR, character_identification)
were graded, and the official pack holds no prompt for it, so the grading prompt is capeval's own (kt_pack.toml,
`qa/grade_open`): the judge sees the question, the reference answer and the model's answer (each fenced as data,
engine/replies/fences.py) and replies "yes" (the same information) or "no". `OpenAnswerGrading` is that step as a
JudgeProtocol, run on the ordinary judging path (content-keyed cache, re-asks of unreadable replies: strict mode's
rule). The replay judge answers it from a recording ({"item_id", "task", "step": "grade", "sub_index", "text"}).
Identical (question, reference, answer) triples are one request: the same judge gives them the same grade.

`qa_verdicts` puts both kinds into one VERDICTS-shaped table (protocol "capability-qa", codes CapabilityQAVerdict):
a reply that names no option or cannot be graded is NO_VERDICT with its reason, never a guess; a question the
captioning model did not answer (an error) is NO_VERDICT with status ERROR.
"""

from __future__ import annotations

import json
import re

import pyarrow as pa

from capeval.engine.keys import pack_tag, protocol_tag, tagged_revision
from capeval.engine.protocols.base import JudgeProtocol, Rendered, make_row, rows_to_table
from capeval.engine.replies.fences import fence
from capeval.engine.schemas import NO_VERDICT, VERDICTS, ParseStatus, conform

from .codes import CapabilityQAVerdict
from .qa import Question, parse_choice
from capeval.engine.packs import load_pack

PROTOCOL = "capability-qa"
GRADE_STEP = "grade"
CHOICE_STEP = "choice"
LETTER_PARSER = "letter-parser"  # the `judge` of multiple-choice rows: no model graded them

GRADE_PROMPT = "qa/grade_open"


def grading_pack(prompts=None):
    """capeval's own grading pack (kt_pack.toml), or the pack at `prompts` (it needs a `qa/grade_open` prompt with
    the placeholders question, reference, answer)."""
    from pathlib import Path

    return load_pack(prompts or Path(__file__).with_name("kt_pack.toml"))


class OpenAnswerGrading(JudgeProtocol):
    """The judge step of open questions: one request per (question, answer)."""

    name = PROTOCOL
    version = "1"
    codes = (CapabilityQAVerdict,)
    headline = ("qa_accuracy",)
    metric_definitions = (
        ("qa_accuracy", "the share of open questions the captioning model answered correctly, graded by the judge, %"),
    )

    def __init__(self, pack=None):
        self.pack = pack or grading_pack()

    def render_grade(self, q: Question, answer: str) -> Rendered:
        system, user = self.pack.render(GRADE_PROMPT, question=fence("question", q.question),
                                        reference=fence("reference", q.answer_text), answer=fence("answer", answer))
        return Rendered(task=q.task, step=GRADE_STEP, user=user, system=system, sub_index=q.sub_index or 0,
                        choices=("yes", "no"), max_tokens=8,
                        fields={"question": q.question, "reference": q.answer_text, "answer": answer},
                        parse={"qa_id": q.qa_id})

    def grade_requests(self, pairs: list[tuple[Question, dict]], *, judge: str, judge_revision: str) -> pa.Table:
        """Request rows for (question, answer caption row) pairs; answers without text are not asked."""
        revision = tagged_revision(judge_revision, protocol_tag(self.name, self.version), pack_tag(self.pack.digest))
        rows = []
        for q, ans in pairs:
            base = {"item_id": q.item_id, "video_id": q.video_id, "caption_key": ans["caption_key"],
                    "captioner": ans["captioner"], "prompt_id": ans["prompt_id"], "frame_spec": ans["frame_spec"]}
            rows.append(make_row(self.render_grade(q, ans["text"]), base, protocol=self.name, judge=judge,
                                 judge_revision=revision, seed=0, trial=0))
        return rows_to_table(rows)

    def parse(self, request, text):
        word = parse_yes_no(text)
        if word is None:
            return NO_VERDICT, ParseStatus.FAILED, f"neither yes nor no: {(text or '').strip()[:80]!r}"
        code = CapabilityQAVerdict.CORRECT if word == "yes" else CapabilityQAVerdict.WRONG
        return int(code), ParseStatus.OK, None


def parse_yes_no(text: str | None) -> str | None:
    """"yes" / "no" from a grading reply: its first word, or a structured {"answer": ...}; else None."""
    if not text:
        return None
    t = text.strip()
    if t.startswith("{"):
        try:
            t = str(json.loads(t).get("answer", ""))
        except (json.JSONDecodeError, AttributeError):
            pass
    m = re.match(r"[\s*_`'\"(\[]*(yes|no)\b", t, re.IGNORECASE)
    return m.group(1).lower() if m else None


# --- one table of QA verdicts ------------------------------------------------------------------------------------

def _row(q: Question, ans: dict | None, *, label: str, judge: str, step: str, verdict: int, status: ParseStatus,
         detail: dict, error: str | None, request_key: str | None = None, raw: str | None = None) -> dict:
    return {"request_key": request_key or (ans or {}).get("caption_key") or q.qa_id, "protocol": PROTOCOL,
            "task": q.task, "item_id": q.item_id, "video_id": q.video_id, "captioner": label,
            "prompt_id": PROTOCOL, "frame_spec": (ans or {}).get("frame_spec"), "step": step,
            "sub_index": q.sub_index, "judge": judge, "seed": 0, "trial": 0,
            "raw_output": raw if raw is not None else (ans or {}).get("text"), "verdict": int(verdict),
            "parse_status": int(status), "detail": json.dumps({"qa_id": q.qa_id, **detail}, ensure_ascii=False),
            "error": error, "attempt": 0}


def choice_row(q: Question, ans: dict | None, label: str) -> dict:
    """The verdict row of a multiple-choice question from the model's answer (None: never answered)."""
    if ans is None or ans.get("text") is None:
        why = (ans or {}).get("error") or "no answer from the captioning model"
        return _row(q, ans, label=label, judge=LETTER_PARSER, step=CHOICE_STEP, verdict=NO_VERDICT,
                    status=ParseStatus.ERROR, detail={"answer": q.answer}, error=why)
    letter, how = parse_choice(ans["text"], q.options or [])
    if letter is None:
        return _row(q, ans, label=label, judge=LETTER_PARSER, step=CHOICE_STEP, verdict=NO_VERDICT,
                    status=ParseStatus.FAILED, detail={"answer": q.answer, "read": how}, error=how)
    code = CapabilityQAVerdict.CORRECT if letter == q.answer else CapabilityQAVerdict.WRONG
    return _row(q, ans, label=label, judge=LETTER_PARSER, step=CHOICE_STEP, verdict=int(code), status=ParseStatus.OK,
                detail={"answer": q.answer, "picked": letter, "read": how}, error=None)


def open_row(q: Question, ans: dict | None, graded: dict | None, label: str, judge: str) -> dict:
    """The verdict row of an open question: the judge's grade of the model's answer (graded: its verdict row)."""
    if ans is None or ans.get("text") is None:
        why = (ans or {}).get("error") or "no answer from the captioning model"
        return _row(q, ans, label=label, judge=judge, step=GRADE_STEP, verdict=NO_VERDICT, status=ParseStatus.ERROR,
                    detail={"reference": q.answer_text}, error=why)
    if graded is None:
        return _row(q, ans, label=label, judge=judge, step=GRADE_STEP, verdict=NO_VERDICT,
                    status=ParseStatus.MISSING, detail={"reference": q.answer_text}, error="not graded")
    return _row(q, ans, label=label, judge=judge, step=GRADE_STEP, verdict=int(graded["verdict"]),
                status=ParseStatus(int(graded["parse_status"])),
                detail={"reference": q.answer_text, "grade": graded.get("raw_output")}, error=graded.get("error"),
                request_key=graded["request_key"])


def qa_verdicts(rows: list[dict]) -> pa.Table:
    if not rows:
        return VERDICTS.empty_table()
    cols = {f.name: pa.array([r.get(f.name) for r in rows], type=f.type) for f in VERDICTS}
    return conform(pa.Table.from_pydict(cols), VERDICTS)


__all__ = ["OpenAnswerGrading", "parse_yes_no", "choice_row", "open_row", "qa_verdicts", "PROTOCOL",
           "LETTER_PARSER", "GRADE_STEP", "CHOICE_STEP", "grading_pack"]
