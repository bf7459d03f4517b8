"""CAPability judge prompts, written in the spirit of the official evaluation/prompt.py (ali-vilab/CAPability).

Scored tasks ask whether the caption describes one annotated aspect (object, number, color, relation, scene, OCR
text, name, action, event) and return {"score": 1 | 0 | -1, "reason": ...} with the official meanings (1 correct,
0 not mentioned, -1 wrong / for action and the 'mentions something else' tasks: the given one not mentioned).
Classification tasks (camera_angle, camera_movement, style) return {"pred": [categories] or ["N/A"], "reason"}.
dynamic_object_number renders one request per annotated object (sub_index = object's position).
Layout for prefix caching: task system prompt, then the caption, then the task text and annotation last.
"""

from __future__ import annotations

import json

from engine.protocols.base import Rendered, annotation_value

from .codes import CLASSIFICATION_TASKS, TASKS

_MEDIUM = {"image": "image", "video": "video"}

_ASPECT = {  # what the caption is checked for, per scored task
    "object_category": "the objects in the {m}",
    "object_number": "the number of objects in the {m}",
    "dynamic_object_number": "the number of objects in the {m}",
    "object_color": "the colors of objects in the {m}",
    "spatial_relation": "the spatial relationships between objects in the {m}",
    "scene": "the scene of the {m}",
    "OCR": "the text (OCR) visible in the {m}",
    "character_identification": "the identity (names) of people or characters in the {m}",
    "action": "the actions in the {m}",
    "event": "the events in the {m}",
}

_RULES = {  # (what is given, scoring rule): 1 / 0 / -1 with the official meanings
    "object_category": ("Object", "Score 1 if the caption mentions this object (an expression with a similar meaning "
                        "counts). Score 0 if the caption mentions no objects at all. Score -1 if the caption mentions "
                        "other objects but not this one."),
    "object_number": ("Object number, as {object: number}", "Count how many of this object the caption describes. "
                      "Score 1 if the caption gives the correct number. Score 0 if the caption does not mention the "
                      "object or gives no specific number (words such as 'some', 'several', 'various' are not "
                      "numbers). Score -1 only if the caption gives a wrong number."),
    "object_color": ("Object color, as {object: color}", "Score 1 if the caption describes this object's color "
                     "correctly (a similar color word counts). Score 0 if the caption does not mention the object or "
                     "does not give its color. Score -1 only if the caption gives a wrong color."),
    "spatial_relation": ("Spatial relationship", "Score 1 if the caption describes this spatial relationship "
                         "correctly. Score 0 if the caption does not mention the objects or their relationship. Score "
                         "-1 only if the caption describes a wrong relationship."),
    "scene": ("Scene", "Score 1 if the caption mentions this scene. Score 0 if the caption gives no scene information "
              "at all. Score -1 only if the caption describes other scenes but not this one."),
    "OCR": ("OCR text", "Score 1 if the caption refers to this text and reproduces it correctly. Score 0 if the "
            "caption says nothing about this text. Score -1 if the caption's reading of the text is wrong."),
    "character_identification": ("Name of the person/character", "Score 1 if the caption names this person or "
                                 "character correctly. Score 0 if the caption mentions no names. Score -1 if the "
                                 "caption gives a wrong name."),
    "action": ("Action", "Score 1 if the caption mentions this action (an expression with a similar meaning counts). "
               "Score 0 if the caption mentions no actions at all. Score -1 if the caption describes other actions but "
               "not this one."),
    "event": ("Event", "Score 1 if the caption describes this event correctly (a similar meaning counts). Score 0 if "
              "the caption is unrelated to this event. Score -1 if the caption describes the related event wrongly."),
}
_RULES["dynamic_object_number"] = _RULES["object_number"]

CATEGORIES = {
    "camera_angle": {
        "level angle": "the subject is shot horizontally (flat shot)",
        "high angle": "the camera looks down on the subject (overhead shot)",
        "low angle": "the camera looks up at the subject (upward shot)",
        "dutch angle": "the camera is rolled about its axis so the horizon is tilted",
    },
    "camera_movement": {
        "left": "the camera pans or tracks to the left",
        "right": "the camera pans or tracks to the right",
        "up": "the camera tilts or booms up",
        "down": "the camera tilts or booms down",
        "in": "the camera dollies toward the subject or zooms in",
        "out": "the camera dollies away from the subject or zooms out, so the subject looks smaller",
        "fixed": "the camera stays (almost) still",
    },
    "style": {
        "realistic": "lifelike, truthful depiction",
        "animated": "2D drawings or 3D computer-generated imagery, e.g. cartoon, anime",
        "special effect": "illusions made with practical or digital effects",
        "old-fashioned": "vintage or classical, historical look",
        "pixel art": "blocky, low-resolution retro pixels",
        "sketch art": "rough drawings emphasising line work",
        "abstract art": "non-representational shapes and colors",
        "impressionism art": "visible brushstrokes, dabs of vivid color capturing light",
        "cubism art": "fragmented geometric planes, several perspectives at once",
    },
}
_CLASS_WHAT = {"camera_angle": "camera angle", "camera_movement": "camera movement", "style": "artistic style"}

SCORE_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"score": {"type": "integer", "enum": [1, 0, -1]}, "reason": {"type": "string", "maxLength": 300}},
    "required": ["score", "reason"],
})


def pred_schema(task: str) -> str:
    return json.dumps({
        "type": "object",
        "properties": {
            "pred": {"type": "array", "items": {"type": "string", "enum": [*CATEGORIES[task], "N/A"]}, "minItems": 1,
                     "maxItems": len(CATEGORIES[task])},
            "reason": {"type": "string", "maxLength": 300},
        },
        "required": ["pred", "reason"],
    })


def _medium(item: dict) -> str:
    return _MEDIUM.get((item.get("media_type") or "").lower(), "video" if item["task"] in (
        "dynamic_object_number", "action", "event", "camera_movement") else "image")


def _system(task: str, m: str) -> str:
    if task in CLASSIFICATION_TASKS:
        return (f"You are an expert in {m} analysis who checks {m} captions. Read the user's caption and classify what "
                f"it says about the {_CLASS_WHAT[task]}.")
    return (f"You are an expert in {m} analysis who checks the accuracy of {m} captions, in particular what they say "
            f"about {_ASPECT[task].format(m=m)}. Compare the user's caption with the given annotation and score it.")


def _annotation_text(task: str, value) -> list[str]:
    if task in ("object_number", "object_color"):
        (obj, val), = list(value.items())[:1] if isinstance(value, dict) else [(value, "")]
        return [f"{{{obj}: {val}}}"]
    if task == "dynamic_object_number":
        return [f"{{{obj}: {num}}}" for obj, num in value.items()]
    return [value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)]


def render(item: dict, caption: dict, *, seed: int, **_opts) -> list[Rendered]:
    task = item["task"]
    if task not in TASKS:
        raise ValueError(f"capability item {item['item_id']!r}: unknown task {task!r} (known: {', '.join(TASKS)})")
    m = _medium(item)
    text = caption.get("text") or ""
    head = f"{m.capitalize()} caption:\n{text}\n\n"
    value = annotation_value(item)
    if task in CLASSIFICATION_TASKS:
        cats = CATEGORIES[task]
        explain = "\n".join(f"- {c}: {d}" for c, d in cats.items())
        user = (head + f"Which of these {_CLASS_WHAT[task]} categories does the caption explicitly describe?\n"
                f"{explain}\nOnly use what the caption says about the {_CLASS_WHAT[task]}; do not infer it from the "
                "rest of the caption. Put the matching categories in the 'pred' list; if the caption says nothing "
                "about it, or what it says fits no category, use [\"N/A\"].\n"
                'Output only JSON: {"pred": ["category", ...], "reason": "why"}')
        return [Rendered(task=task, step="judge", system=_system(task, m), user=user, json_schema=pred_schema(task),
                         max_tokens=256, fields={"caption": text, "categories": json.dumps(list(cats)),
                                                 "annotation": str(value)},
                         parse={"annotation": str(value), "kind": "classification"})]
    given, rule = _RULES[task]
    out = []
    for sub, ann in enumerate(_annotation_text(task, value)):
        user = (head + f"{given}: {ann}\n{rule}\n"
                'Output only JSON: {"score": 1 or 0 or -1, "reason": "why"}')
        out.append(Rendered(task=task, step="judge", sub_index=sub, system=_system(task, m), user=user,
                            json_schema=SCORE_SCHEMA, max_tokens=256,
                            fields={"caption": text, "annotation": ann}, parse={"kind": "score"}))
    return out
