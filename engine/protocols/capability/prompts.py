"""CAPability judge requests, rendered from a prompt pack (engine/packs.py).

The pack is capeval's own (`pack.toml` beside this file) unless the run names another (`prompts`, e.g. the official
../shared/protocols/capability.toml); official mode requires an explicit official pack. Each task uses the pack's
prompt `judge/<task>`: system = role_system, user = user.format(**fields). The fields follow the official filling
rules (eval.py / prompt.py, as the pack's `placeholders` describe them):

* caption: the caption text exactly as given (action items are paired with the event captions upstream: they share
  the event videos' file ids);
* a text annotation fills every placeholder other than `caption` (event, action, object, scene, ocr_text, name, ...);
* an {object: value} annotation fills `object` with the key and every other placeholder (number, color) with
  str(value); object_number / object_color use the first pair, dynamic_object_number renders one request per pair,
  in the annotation's order (sub_index = position);
* camera_angle / camera_movement / style have only the caption; their labels come from the pack's [[category]].

Official mode sends what the official script sends: the two messages and no sampling parameters (temperature None,
no structured output). Strict mode fences the caption and text annotations as data (engine/replies/fences.py). Strict mode asks at temperature 0 and sends a JSON schema whose every instance the official
validator accepts (param `structured`: default on, except for judges known to lack JSON-schema support such as
GPT-4-Turbo; `structured=false` turns it off).
"""

from __future__ import annotations

import json

from capeval.engine import packs
from capeval.engine.replies.fences import fence
from capeval.engine.packs import PackError, PromptPack, resolve_pack
from capeval.engine.protocols.base import Rendered, annotation_value

from .codes import CLASSIFICATION_TASKS, TASKS
from .official import COPIED_FIELD, Categories

MODES = ("strict", "official")
DICT_TASKS = ("object_number", "object_color", "dynamic_object_number")
#: Official mode sends no max_tokens (None), as eval.py sends none: the API's default, until the model stops.
MAX_TOKENS = {"official": None, "strict": 512}
#: A copied '{object: number}' the official validator accepts: one ':' and an integer after it. Every repeat is
#: bounded: structured decoding ignores maxLength beside a pattern, and a small judge (SmolLM2-135M) otherwise fills an
#: open run ('[^:]*', '.*') until max_tokens, so the reply is cut and never parses.
NUMBER_FIELD_PATTERN = r"^[^:]{0,80}:[ ]{0,4}[0-9]{1,9}[ ]{0,4}\}{0,2}$"
#: A copied '{object: color}': the official validator takes the text after the last ':'.
COLOR_FIELD_PATTERN = r"^[^:]{0,80}:.{0,80}$"


def flag(value) -> bool:
    """A boolean protocol param that may arrive as text from the CLI (--param strict_match=true)."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("1", "true", "yes", "on"):
            return True
        if v in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"expected true or false, got {value!r}")
    return bool(value)


#: Judges known to lack JSON-schema structured output (substring of the judge/model name, lower case):
#: GPT-4-Turbo, the paper's judge, offers JSON mode but no schema.
NO_SCHEMA_JUDGES = ("gpt-4-turbo", "gpt-4-1106", "gpt-4-0125", "gpt-4-0613", "gpt-3.5")


def use_structured(structured, mode: str, judge: str = "") -> bool:
    """structured output: never in official mode; in strict mode as asked, or by default unless the judge is known
    to lack JSON-schema support."""
    if check_mode(mode) == "official":
        return False
    if structured is None or (isinstance(structured, str) and structured.strip().lower() in ("", "auto")):
        return not any(name in (judge or "").lower() for name in NO_SCHEMA_JUDGES)
    return flag(structured)


def check_mode(mode: str | None) -> str:
    return packs.check_mode("capability", mode)


def pack_for(mode: str = "strict", prompts=None) -> PromptPack:
    return resolve_pack("capability", prompts, mode=check_mode(mode))


def categories(pack: PromptPack, task: str) -> Categories:
    for entry in pack.table("category"):
        if entry.get("task") == task:
            names = entry.get("names")
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise PackError(f"{pack.path}: [[category]] for {task!r} needs 'names', a list of text")
            return Categories(tuple(names), tuple(entry.get("explains") or ()))
    raise PackError(f"{pack.path}: no [[category]] table with task = {task!r} (needed to validate its replies)")


def _score_schema(task: str) -> str:
    props = {"score": {"type": "integer", "enum": [1, 0, -1]}, "reason": {"type": "string", "maxLength": 400}}
    copied = {"type": "string", "maxLength": 300}
    if task in ("object_number", "dynamic_object_number"):
        copied = {"type": "string", "pattern": NUMBER_FIELD_PATTERN}
    elif task == "object_color":
        copied = {"type": "string", "pattern": COLOR_FIELD_PATTERN}
    field = COPIED_FIELD[task]
    return json.dumps({"type": "object", "properties": {field: copied, **props},
                       "required": [field, "score", "reason"]})


def _pred_schema(cats: Categories) -> str:
    return json.dumps({"type": "object", "properties": {
        "pred": {"type": "array", "items": {"type": "string", "enum": [*cats.names, "N/A"]}, "minItems": 1,
                 "maxItems": len(cats.names)},
        "reason": {"type": "string", "maxLength": 400}}, "required": ["pred", "reason"]})


def _fills(task: str, value, names: list[str], fenced: bool = False) -> list[tuple[dict, object, dict]]:
    """(template fields, annotation the validator compares with, fields for structured backends) per request.
    `fenced` (strict mode): a text annotation enters the prompt fenced as data; {object: value} pairs stay as they
    are, since the reply copies them in that very form."""
    others = [n for n in names if n != "caption"]
    if isinstance(value, dict):
        if not value:
            raise ValueError(f"{task}: empty {{object: value}} annotation")
        pairs = list(value.items()) if task == "dynamic_object_number" else list(value.items())[:1]
        out = []
        for obj, v in pairs:
            fields = {n: str(v) for n in others}
            fields["object"] = obj
            out.append((fields, {obj: v}, {"annotation": json.dumps({obj: v}, ensure_ascii=False), "object": obj,
                                           "value": str(v)}))
        return out
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    shown = fence("annotation", text) if fenced else text
    return [({n: shown for n in others}, text, {"annotation": text})]


def render(item: dict, caption: dict, *, pack: PromptPack, mode: str = "strict", strict_match=False,
           structured=None, judge: str = "", **_opts) -> list[Rendered]:
    task = item["task"]
    if task not in TASKS:
        raise ValueError(f"capability item {item['item_id']!r}: unknown task {task!r} (known: {', '.join(TASKS)})")
    mode = check_mode(mode)
    structured = use_structured(structured, mode, judge)
    prompt = pack.prompt(f"judge/{task}")
    text = caption.get("text")
    text = "" if text is None else text
    # Strict mode fences the caption (the captioner's text may hold instructions or a ready-made verdict); official
    # mode sends the official prompt byte for byte (docs/fidelity_capability.md: the exposure that leaves).
    shown = fence("caption", text) if mode == "strict" else text
    # Only the object tasks carry {object: value} dicts; every other annotation is text and stays exactly as given
    # (decoding "1.50" or " 12" as JSON numbers would change the prompt).
    value = annotation_value(item) if task in DICT_TASKS else item.get("annotation")
    value = "" if value is None else value
    names = list(prompt.placeholders) or ["caption"]
    # official: model and the two messages only (eval.py:90-109): no temperature, max_tokens or seed
    sampling = {"temperature": None if mode == "official" else 0.0, "max_tokens": MAX_TOKENS[mode],
                "send_seed": mode != "official"}
    base_parse = {"mode": mode, "task": task, "strict_match": flag(strict_match)}
    if task in CLASSIFICATION_TASKS:
        cats = categories(pack, task)
        system, user = prompt.render(caption=shown, **{n: "" for n in names if n != "caption"})
        return [Rendered(task=task, step="judge", system=system, user=user,
                         json_schema=_pred_schema(cats) if structured else None,
                         fields={"caption": text, "categories": json.dumps(list(cats.names)), "annotation": str(value)},
                         parse={**base_parse, "annotation": value, "names": list(cats.names),
                                "explains": list(cats.explains)}, **sampling)]
    out = []
    for sub, (fields, compared, backend_fields) in enumerate(_fills(task, value, names, fenced=mode == "strict")):
        system, user = prompt.render(caption=shown, **fields)
        out.append(Rendered(task=task, step="judge", sub_index=sub, system=system, user=user,
                            json_schema=_score_schema(task) if structured else None,
                            fields={"caption": text, **backend_fields},
                            parse={**base_parse, "annotation": compared}, **sampling))
    return out
