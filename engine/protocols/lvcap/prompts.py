"""LVCap-Eval prompts. Scene level: yes/no questions answered from the caption (choices yes/no). Event level
(AutoDQ, as DREAM-1K): step "extract" lists the caption's events (JSON array); step "entail_r" checks each reference
event against the caption and step "entail_p" each extracted caption event against the reference description,
choices entailment / neutral / contradiction. Items of task "events" carry the reference events as a JSON list in
`annotation` and the reference description in `answer` (the events joined when absent), as DREAM-1K does."""

from __future__ import annotations

import json

from engine.protocols.base import Rendered, annotation_value

YES_NO = ("yes", "no")
ENTAIL_CHOICES = ("entailment", "neutral", "contradiction")

SCENE_SYSTEM = ("You answer yes/no questions about a video using ONLY its caption. Reply with exactly one word: "
                "yes or no.")
EXTRACT_SYSTEM = ("You extract the events from a video description: list, in order, each distinct action or change "
                  "that happens, as short sentences each with its subject. Output only a JSON array of strings.")
ENTAIL_SYSTEM = ("Given a video description (the premise) and an event (the hypothesis), classify their relationship: "
                 "'entailment' if the description entails the event; 'contradiction' if some detail of the "
                 "description contradicts the event; 'neutral' otherwise. Reply with exactly one word.")
EXTRACT_SCHEMA = json.dumps({"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 20})


def reference_events(item: dict) -> list[str]:
    value = annotation_value(item)
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise ValueError(f"lvcap item {item['item_id']!r}: events annotation must be a JSON list of strings")
    return value


def render_entail(task: str, step: str, premise: str, event: str, sub_index: int) -> Rendered:
    user = f"Video description:\n{premise}\n\nEvent: {event}\nRelationship:"
    return Rendered(task=task, step=step, sub_index=sub_index, system=ENTAIL_SYSTEM, user=user, choices=ENTAIL_CHOICES,
                    max_tokens=8, fields={"caption": premise, "event": event}, parse={"event": event})


def render(item: dict, caption: dict, *, seed: int, **_opts) -> list[Rendered]:
    text = caption.get("text") or ""
    if item["task"] != "events":  # scene-level question
        question = item.get("annotation") or ""
        answer = (item.get("answer") or "").strip().lower()
        if answer not in YES_NO:
            raise ValueError(f"lvcap item {item['item_id']!r}: scene answer must be yes/no, got {item.get('answer')!r}")
        user = f"Caption:\n{text}\n\nQuestion: {question}\nAnswer (yes or no):"
        return [Rendered(task=item["task"], step="answer", system=SCENE_SYSTEM, user=user, choices=YES_NO,
                         max_tokens=4, fields={"caption": text, "question": question},
                         parse={"answer": answer})]
    events = reference_events(item)
    reference = item.get("answer") or " ".join(events)
    out = [Rendered(task="events", step="extract", system=EXTRACT_SYSTEM, user=f"Video description:\n{text}\n\nEvents:",
                    json_schema=EXTRACT_SCHEMA, max_tokens=512, fields={"caption": text},
                    parse={"reference": reference})]
    out += [render_entail("events", "entail_r", text, e, i) for i, e in enumerate(events)]
    return out
