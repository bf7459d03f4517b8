"""LVCap-Eval requests, rendered from prompt packs (capeval.engine.packs).

Items: a scene question has `task` "scene" (any task other than "events"), the question in `annotation`, yes/no in
`answer`, and in `extra` (JSON) optionally `scene` (its scene number) and `scene_description` (the reference text of
that scene). An event item has `task` "events", the reference events as a JSON list in `annotation` and the reference
description in `answer` (the events joined when absent), as dream1k.py produces.

Params (sweep `protocols[].params`, CLI `--mode/--prompts/--param`):
* `mode` = "strict" (default, capeval's flow) or "official" (the published flow: Prompt4 per video for scenes,
  AutoDQ for events);
* `prompts`: the pack for scene QA (official: the LVCap pack, `lvcap.toml`, id judge/scene_qa);
* `event_prompts`: the pack for events (official: the AutoDQ pack, `autodq.toml`, ids judge/extract_events and
  judge/entailment). Without it the `prompts` pack is used when it has those ids.
Strict mode fences every text it did not write (caption, scene description, question, event) as data
(engine/replies/fences.py); official mode sends the official prompts byte for byte.
Without explicit packs strict mode uses capeval's own pack (pack.toml here) and official mode reads
$CAPEVAL_PACKS/lvcap.toml and $CAPEVAL_PACKS/autodq.toml (capeval.engine.packs.resolve_pack).
"""

from __future__ import annotations

import json

from capeval.engine.replies.fences import fence
from capeval.engine.packs import PromptPack, load_pack, resolve_pack
from capeval.engine.protocols.base import Rendered, annotation_value

from . import autodq, paper_events

YES_NO = ("yes", "no")
ENTAIL_CHOICES = ("entailment", "neutral", "contradiction")
EXTRACT_SCHEMA = json.dumps({"type": "array", "items": {"type": "string", "maxLength": 200}, "maxItems": 20})
NO_SCENE = "(not given)"


def packs(mode: str = "strict", prompts=None, event_prompts=None, *, scenes: bool = True, events: bool = True,
          event_scoring: str | None = None, **_opts) -> tuple[PromptPack | None, PromptPack | None]:
    """(scene pack, event pack) for a run; a pack the run does not need (no scene items / no event items) is None,
    so an events-only official run needs only its event pack. `event_scoring` (official mode, paper_events.py):
    "paper" (default) takes the event prompts from the LVCap-Eval pack (Prompt2, Prompt5), "autodq" from the
    AutoDQ pack."""
    scoring = paper_events.check_scoring(mode, event_scoring)
    scene = resolve_pack("lvcap", prompts, mode=mode, official_name="lvcap") if scenes or prompts else None
    if not events:
        return scene, None
    if scoring == "paper":
        if event_prompts:
            pack, where = load_pack(event_prompts), "event_prompts"
        elif scene is not None:
            pack, where = scene, "prompts"
        else:
            pack, where = resolve_pack("lvcap", None, mode=mode, official_name="lvcap"), "official"
        paper_events.check_pack(pack, where)
        return scene, pack
    if event_prompts:
        return scene, load_pack(event_prompts)
    if scene is not None and prompts and scene.has(autodq.ENTAIL_ID):
        return scene, scene
    return scene, resolve_pack("lvcap", None, mode=mode, official_name="autodq")


def reference_events(item: dict) -> list[str]:
    value = annotation_value(item)
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise ValueError(f"lvcap item {item['item_id']!r}: events annotation must be a JSON list of strings")
    return value


def reference_text(item: dict, events: list[str]) -> str:
    return item.get("answer") or " ".join(events)


def item_extra(item: dict) -> dict:
    try:
        extra = json.loads(item.get("extra") or "{}")
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"lvcap item {item['item_id']!r}: field 'extra' is not JSON ({exc})") from None
    return extra if isinstance(extra, dict) else {}


def scene_answer(item: dict) -> str:
    answer = (item.get("answer") or "").strip().lower()
    if answer not in YES_NO:
        raise ValueError(f"lvcap item {item['item_id']!r}: scene answer must be yes/no, got {item.get('answer')!r}")
    return answer


# -- strict mode (capeval's flow) ----------------------------------------------------------------------------------
def render_entail_one(pack: PromptPack, step: str, premise: str, event: str, sub_index: int) -> Rendered:
    # strict only: the premise is the caption (recall) and the event may be one the judge extracted from it
    # (precision): both fenced as data
    system, user = pack.render("judge/entail_one", caption=fence("description", premise), event=fence("event", event))
    return Rendered(task="events", step=step, sub_index=sub_index, system=system, user=user, choices=ENTAIL_CHOICES,
                    max_tokens=8, fields={"caption": premise, "event": event}, parse={"event": event})


def render_strict(item: dict, caption: dict, pack: PromptPack, event_pack: PromptPack) -> list[Rendered]:
    text = caption.get("text") or ""
    if item["task"] != "events":  # scene-level question
        question = item.get("annotation") or ""
        scene = item_extra(item).get("scene_description") or NO_SCENE
        system, user = pack.render("judge/scene_answer", scene=fence("scene", scene), caption=fence("caption", text),
                                   question=fence("question", question))
        return [Rendered(task=item["task"], step="answer", system=system, user=user, choices=YES_NO, max_tokens=4,
                         fields={"caption": text, "question": question, "reference": scene},
                         parse={"answer": scene_answer(item)})]
    events = reference_events(item)
    reference = reference_text(item, events)
    system, user = event_pack.render("judge/extract_list", caption=fence("caption", text))
    out = [Rendered(task="events", step="extract", system=system, user=user, json_schema=EXTRACT_SCHEMA,
                    max_tokens=512, fields={"caption": text},
                    parse={"reference": reference, "event_pack": str(event_pack.path)})]
    out += [render_entail_one(event_pack, "entail_r", text, e, i) for i, e in enumerate(events)]
    return out


# -- official mode ---------------------------------------------------------------------------------------------------
def render_official_events(item: dict, caption: dict, event_pack: PromptPack) -> list[Rendered]:
    """AutoDQ: extraction + the recall call now; the precision call follows the extraction (next_requests)."""
    text = caption.get("text") or ""
    events = reference_events(item)
    reference = reference_text(item, events)
    ctx = {"reference": reference, "caption_text": text, "event_pack": str(event_pack.path), "mode": "official"}
    events_repr, n = autodq.events_text(events, reference.lower())
    return [autodq.render_extract(event_pack, "events", text, parse=ctx),
            autodq.render_entailment(event_pack, "events", "recall", description=text.lower(),
                                     events_repr=events_repr, n_events=n,
                                     events_json=json.dumps(events if n else [reference.lower()]),
                                     parse={"mode": "official"})]


def render_precision(event_pack: PromptPack, caption_text: str, reference: str, extracted: dict) -> Rendered:
    """The precision call from the accepted extraction (`extracted`: parse detail with `events` and `events_repr`,
    the Python str() of the list exactly as literal_eval returned it)."""
    events = extracted["events"]
    if len(events) == 0:
        events_repr, n = autodq.events_text([], caption_text.lower())
        shown = [caption_text.lower()]
    else:
        events_repr, n, shown = extracted["events_repr"], len(events), [str(e) for e in events]
    return autodq.render_entailment(event_pack, "events", "precision", description=reference.lower(),
                                    events_repr=events_repr, n_events=n, events_json=json.dumps(shown),
                                    parse={"mode": "official", "events": shown})


def render_scene_video(items: list[dict], caption: dict, pack: PromptPack) -> Rendered:
    """Prompt4: ONE call per (video, caption) with every scene question of the video attached as JSON after the
    pack's instructions (the paper does not say how its two JSON files are attached: this layout is capeval's)."""
    scenes: dict[object, dict] = {}
    for item in items:
        extra = item_extra(item)
        key = extra.get("scene", 0)
        scene = scenes.setdefault(key, {"scene": key, "description": extra.get("scene_description") or NO_SCENE,
                                        "questions": []})
        scene["questions"].append({"question": item.get("annotation") or "", "options": ["Yes", "No"],
                                   "correct_answer": scene_answer(item).capitalize()})
    ordered = [scenes[k] for k in sorted(scenes, key=lambda k: (0, k, "") if isinstance(k, (int, float)) else (1, 0, str(k)))]
    video_id = items[0]["video_id"]
    system, instructions = pack.render("judge/scene_qa")
    qa = json.dumps({"video_id": video_id, "scenes": ordered}, ensure_ascii=False)
    description = json.dumps({"model": caption.get("captioner"), "video_id": video_id,
                              "description": caption.get("text") or ""}, ensure_ascii=False)
    user = f"{instructions}\n\nQA set:\n{qa}\n\nModel description:\n{description}"
    return Rendered(task="scene", step="scene_qa", system=system, user=user, max_tokens=None, temperature=None,
                    send_seed=False, fields={"caption": caption.get("text") or "", "scenes": json.dumps(ordered, ensure_ascii=False)},
                    parse={"mode": "official", "questions_per_scene": [len(s["questions"]) for s in ordered],
                           "item_ids": [i["item_id"] for i in items]})
