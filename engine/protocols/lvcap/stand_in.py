"""LVCap-Eval's stand-in answers for the local judge (`JudgeProtocol.stand_in_answer`; engine/stand_in.py): the
evaluation and AutoDQ steps here, the ground-truth construction steps (`lvcap/gt/...`) in stand_in_gt.py.

`answer(request, embedder)` returns text in the format the step's prompt asks for, so that both modes' parsers take
it on the first try:

| task (`lvcap/<task>/<step>`) | mode | reply |
| --- | --- | --- |
| `*/answer` | strict scene QA | `yes` / `no` |
| `*/scene_qa` | official (Prompt4) | `{"model", "video_id", "scores": [correct per scene], "total_score"}` |
| `events/extract` | strict (JSON schema set) | a JSON array of event sentences |
| `events/extract` | official (AutoDQ) | a Python dict literal `{'events': [...]}` |
| `events/extract` | official (paper, Prompt2: field `reply_format` = jsonl) | JSON Lines, `{"1": "event"}` per line |
| `events/event_match` | official (paper, Prompt5) | one JSON line `{video_id, model, recall, precision, f1}` |
| `events/entail_r`, `events/entail_p` | strict | one label |
| `events/recall`, `events/precision` | official | JSON `{"events": [{"event", "relationship", "reason"}]}`, one entry per event |

A statement is supported by a text when its best sentence similarity (the local judge's MiniLM embedder:
`embedder.max_sim(a, sentences)`) or its content-word overlap reaches `SUPPORT` (0.6), and is a contradiction when it
is only loosely related (>= `RELATED`, 0.35) and exactly one side is negated. `embedder=None` uses word overlap
alone. Like the rest of the local judge, this is a plumbing check, not a model: publish numbers from an LLM judge.
"""

from __future__ import annotations

import json
import re

from capeval.engine.stand_in import (NEGATIONS, StandIn, StandInRequest, TextSimilarity, compared_texts, overlap,
                                     pick, sentences, task_parts, words)

SUPPORT = 0.6
RELATED = 0.35
MAX_EVENTS = 10


def _similarity(embedder, statement: str, text: str) -> float:
    lex = overlap(statement, text)
    if embedder is None or not statement.strip() or not (text or "").strip():
        return lex
    return max(lex, float(embedder.max_sim(statement, sentences(text))))


def relationship(embedder, statement: str, text: str) -> str:
    sim = _similarity(embedder, statement, text)
    negated = bool(NEGATIONS & set(words(statement))) != bool(NEGATIONS & set(words(text)))
    if sim >= SUPPORT and not negated:
        return "entailment"
    if sim >= RELATED and negated:
        return "contradiction"
    return "neutral"


def extract_events(text: str) -> list[str]:
    """Clauses of the text as events: sentences split at ', and' / ', then' / ';', at most MAX_EVENTS."""
    parts = [c.strip().rstrip(".") for s in sentences(text) for c in re.split(r",\s*(?:and |then )|;\s*", s)]
    return [p + "." for p in parts if len(words(p)) >= 2][:MAX_EVENTS]


def supports_yes(embedder, question: str, text: str) -> bool:
    return relationship(embedder, question, text) == "entailment"


def _scene_qa(request, embedder) -> str:
    scenes = json.loads(request.fields.get("scenes") or "[]")
    caption = request.fields.get("caption", "")
    scores, total, correct = [], 0, 0
    for scene in scenes:
        right = 0
        for q in scene.get("questions", []):
            said = "Yes" if supports_yes(embedder, q.get("question", ""), caption) else "No"
            right += said.lower() == str(q.get("correct_answer", "")).lower()
        scores.append(right)
        total += len(scene.get("questions", []))
        correct += right
    return json.dumps({"model": "local", "video_id": (request.meta or {}).get("item_id"), "scores": scores,
                       "total_score": round(100.0 * correct / total, 2) if total else 0.0})


def _event_match(request, embedder) -> str:
    """Prompt5: a GT event is matched when the model's events (joined) support it; recall = matched GT / GT,
    precision = matched GT / model events (capped at 1), as the prompt defines them, with two decimals."""
    gt = json.loads(request.fields.get("gt_events") or "[]")
    model = json.loads(request.fields.get("model_events") or "[]")
    predicted = " ".join(str(e).rstrip(".") + "." for e in model)
    matched = sum(relationship(embedder, str(e), predicted) == "entailment" for e in gt) if model else 0
    recall = matched / len(gt) if gt else 0.0
    precision = min(1.0, matched / len(model)) if model else 0.0
    f1 = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
    return json.dumps({"video_id": request.fields.get("video_id"), "model": "merge", "recall": round(recall, 2),
                       "precision": round(precision, 2), "f1": round(f1, 2)})


def answer(request: StandInRequest, embedder: TextSimilarity | None = None) -> str:
    """Reply text for one LVCap/AutoDQ request."""
    _, _task, step = task_parts(request)
    f = request.fields
    caption = f.get("caption", "")
    if step == "answer":
        yes = supports_yes(embedder, f.get("question", ""), caption)
        return pick(request.choices, "yes" if yes else "no")
    if step == "scene_qa":
        return _scene_qa(request, embedder)
    if step == "event_match":
        return _event_match(request, embedder)
    if step == "extract":
        events = extract_events(caption)
        if request.json_schema:  # strict: a JSON array
            return json.dumps(events)
        if f.get("reply_format") == "jsonl":  # official, the paper's Prompt2: JSON Lines
            return "\n".join(json.dumps({str(i): e}) for i, e in enumerate(events, start=1)) or "{}"
        return str({"events": events})  # official: a Python dict literal, as the AutoDQ prompt asks
    if step in ("entail_r", "entail_p", "entail"):
        return pick(request.choices, relationship(embedder, f.get("event", ""), caption))
    if step in ("recall", "precision"):
        events = json.loads(f.get("events") or "[]")
        judged = []
        for event in events:
            label = relationship(embedder, str(event), caption)
            judged.append({"event": str(event), "relationship": label,
                           "reason": f"best match in the description: {label}"})
        return json.dumps({"events": judged})
    raise ValueError(f"local judge: no LVCap answer for step {step!r} (task {request.task!r})")


def stand_in(request: StandInRequest) -> StandIn:
    """The deferred reply to an LVCap-Eval / AutoDQ request."""
    return StandIn(texts=compared_texts(request.fields), reply=lambda similarity: answer(request, similarity))
