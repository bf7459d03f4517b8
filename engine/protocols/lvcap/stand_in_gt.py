"""LVCap-Eval's stand-in answers to its ground-truth construction (`capeval construct lvcap`, steps
`lvcap/gt/narrative`, `lvcap/gt/events`, `lvcap/gt/qa`), reached through stand_in.py.

A plumbing check like the rest of the local judge, not a writer: it answers from the request's `fields` in the layout
the step's prompt asks for (`reply_format` "strict": capeval's pack; "paper": the paper's Prompt1-3), so that the whole
pipeline runs on a laptop and its parsers see both layouts.

* narrative: consecutive shots whose captions use the same words (word overlap >= MERGE both ways) form one
  scene; the narrative is the scene's captions with their times.
* events: the narrative's clauses (stand_in.extract_events).
* qa: the scene's clauses as questions, alternately a "yes" question (the clause as stated) and a "no" question (the
  clause negated, which the local judge's scene answerer reads as a contradiction of a caption that states it).
"""

from __future__ import annotations

import json
import re

from capeval.engine.stand_in import StandIn, StandInRequest, overlap, task_parts

from .stand_in import extract_events

MERGE = 0.95
_TIMES = re.compile(r"\s*\(from [\d.]+ s to [\d.]+ s\)")
DIMENSIONS = ("temporal", "atmosphere", "emotion", "causality", "relations", "cinematic", "symbolism", "factuality")
_LEADS = ("Does the video show that", "Is it shown that", "Does the description say that", "Can one see that",
          "Is it true that")
_YES = tuple(f"{lead} {{c}}?" for lead in _LEADS)
_NO = tuple(f"{lead} it is not the case that {{c}}?" for lead in _LEADS)


def _scenes(shots: list[dict]) -> list[list[dict]]:
    groups: list[list[dict]] = []
    for shot in shots:
        prev = groups[-1][-1]["caption"] if groups else None
        if prev is not None and min(overlap(prev, shot["caption"]), overlap(shot["caption"], prev)) >= MERGE:
            groups[-1].append(shot)
        else:
            groups.append([shot])
    return groups


def _narrative(group: list[dict]) -> str:
    return " ".join(f"{s['caption'].strip().rstrip('.')} (from {s['start']:.1f} s to {s['end']:.1f} s)." for s in group)


def _questions(narrative: str, n: int) -> list[dict]:
    plain = _TIMES.sub("", narrative)  # the times a local narrative adds are no part of what a caption says
    clauses = [c.rstrip(".") for c in extract_events(plain)] or [plain.rstrip(".")]
    out = []
    for i in range(n):
        clause = clauses[(i // 2) % len(clauses)]
        clause = clause[:1].lower() + clause[1:]
        variant = (i // (2 * len(clauses))) % len(_LEADS)
        yes = i % 2 == 0
        out.append({"dimension": DIMENSIONS[i % len(DIMENSIONS)],
                    "question": (_YES if yes else _NO)[variant].format(c=clause), "answer": "yes" if yes else "no",
                    "analysis": "stated in the description" if yes else "the description states the opposite"})
    return out


def _paper_qa(scenes: list[dict], n: int) -> str:
    lines = []
    for scene in scenes:
        lines += [f"Scene: {scene['scene']}", f"Description: {scene['narrative']}"]
        for k, q in enumerate(_questions(scene["narrative"], n), start=1):
            lines += [f"Question {k}:", f"    Dimension: {q['dimension'].capitalize()}",
                      f"    Question: {q['question']}", '    Options: ["Yes", "No"]',
                      f"    Correct Answer: \"{q['answer'].capitalize()}\"", f"    Analysis: {q['analysis']}"]
    return "\n".join(lines)


def answer(request: StandInRequest) -> str:
    """Reply text for one `lvcap/gt/<step>` request."""
    step = task_parts(request)[2]
    f = request.fields
    paper = f.get("reply_format") == "paper"
    if step == "narrative":
        groups = _scenes(json.loads(f["shots"]))
        if paper:
            return "\n".join(json.dumps({str(i): _narrative(g)}) for i, g in enumerate(groups, start=1))
        return "\n".join(json.dumps({"scene": i, "first_shot": g[0]["shot"], "last_shot": g[-1]["shot"],
                                     "narrative": _narrative(g)}) for i, g in enumerate(groups, start=1))
    if step == "events":
        events = extract_events(f.get("narrative", ""))
        if paper:
            return "\n".join(json.dumps({str(i): e}) for i, e in enumerate(events, start=1)) or "{}"
        return json.dumps(events)
    if step == "qa":
        n = int(f.get("n_questions") or 10)
        if paper:
            return _paper_qa(json.loads(f["scenes"]), n)
        return "\n".join(json.dumps(q) for q in _questions(f.get("narrative", ""), n))
    raise ValueError(f"local judge: no LVCap ground-truth answer for step {step!r} (task {request.task!r})")


def stand_in(request: StandInRequest) -> StandIn:
    """The deferred reply to an `lvcap/gt/...` request: it compares nothing by meaning."""
    return StandIn(texts=frozenset(), reply=lambda similarity: answer(request))
