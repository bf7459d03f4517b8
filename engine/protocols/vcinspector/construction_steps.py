"""The generation steps of VC-Inspector's augmentation chain (construction.py): what each step asks
and how its reply is read, in both modes.

official: the official pack's augment/* prompts (src/gen_data/prompts.py), filled as the official generator fills
    them (augmentation.py: the caption, the element, the new element as the model wrote it); temperature 0 and at
    most 2,048 new tokens (model_engine.py); a reply is taken as it comes: the extraction must be a Python list
    literal (the code eval()s it), a new element or rewritten caption is used as written (stripped), one attempt.
strict: capeval's augment_pack.toml: JSON answers under a schema, captions and elements fenced or JSON-quoted as
    data, replies checked (a replacement that equals the original, a rewrite without the new element) and re-asked
    twice at a raised temperature.
"""

from __future__ import annotations

import json

from capeval.engine.construct.base import Ask, GenerationStep, ParseFailure
from capeval.engine.protocols.vcinspector.augment import clean_elements, parse_list_literal
from capeval.engine.replies.fences import fence
from capeval.engine.replies.repair import ParseError, extract_verdict

TASK = "augment"
EXTRACT = {"objects": "extract_objects", "actions": "extract_actions"}
REPLACE = {"objects": "new_object", "actions": "new_action"}
SUBSTITUTE = "substitute"
STEPS = (EXTRACT["objects"], EXTRACT["actions"], REPLACE["objects"], REPLACE["actions"], SUBSTITUTE)
OFFICIAL_MAX_TOKENS = 2048  # model_engine.py: max_completion_tokens = --gen_max_new_tokens (default 2048)
MAX_REPLACEMENT_WORDS = 8  # strict: a "replacement" longer than this is an explanation, not an element


def _schema(key: str, kind: str) -> str:
    value = {"type": "array", "items": {"type": "string", "maxLength": 80}, "maxItems": 40} if kind == "list" else \
        {"type": "string", "maxLength": 600 if key == "caption" else 80}
    return json.dumps({"type": "object", "properties": {key: value}, "required": [key]})


class AugmentStep(GenerationStep):
    """One step of the chain; `name` is one of STEPS. Rows name protocol "vcinspector", task "augment", so a
    backend that routes by "<protocol>/<task>/<step>" sees e.g. "vcinspector/augment/new_object"."""

    protocol = "vcinspector"
    version = "1"

    def __init__(self, name: str, mode: str):
        if name not in STEPS:
            raise ValueError(f"unknown augmentation step {name!r}")
        self.name, self.mode = name, mode

    def parse(self, context: dict, text: str):
        text = "" if text is None else text
        if self.name in EXTRACT.values():
            return self._elements(context, text)
        if self.name in REPLACE.values():
            return self._replacement(context, text)
        return self._rewrite(context, text)

    def _strict_field(self, context: dict, text: str, key: str):
        try:
            obj, _ = extract_verdict(text, (key,), data=tuple(context.get("data") or ()))
        except ParseError as exc:
            raise ParseFailure(str(exc)) from None
        return obj[key]

    def _elements(self, context: dict, text: str) -> dict:
        if self.mode == "official":
            try:
                return {"elements": parse_list_literal(text)}
            except ValueError as exc:
                raise ParseFailure(str(exc)) from None
        value = self._strict_field(context, text, context["key"])
        if not isinstance(value, list):
            raise ParseFailure(f"{context['key']!r} is not a list")
        return {"elements": clean_elements(value)}

    def _replacement(self, context: dict, text: str) -> dict:
        if self.mode == "official":
            if not text.strip():
                raise ParseFailure("empty reply")
            # the official code passes the reply to the substitution as written and records it stripped
            return {"raw": text, "value": text.strip()}
        value = self._strict_field(context, text, "replacement")
        if not isinstance(value, str) or not value.strip():
            raise ParseFailure("no replacement given")
        value = " ".join(value.split())
        if value.lower() == context["original"].strip().lower():
            raise ParseFailure(f"the replacement {value!r} is the original element")
        if len(value.split()) > MAX_REPLACEMENT_WORDS:
            raise ParseFailure(f"the replacement has {len(value.split())} words: an explanation, not an element")
        return {"raw": value, "value": value}

    def _rewrite(self, context: dict, text: str) -> dict:
        if self.mode == "official":
            if not text.strip():
                raise ParseFailure("empty reply")
            return {"caption": text.strip()}
        value = self._strict_field(context, text, "caption")
        if not isinstance(value, str) or not value.strip():
            raise ParseFailure("no caption given")
        value = value.strip()
        if value == context["before"].strip():
            raise ParseFailure("the caption came back unchanged")
        if context["new"].strip().lower() not in value.lower():
            raise ParseFailure(f"the rewritten caption does not contain the replacement {context['new'].strip()!r}")
        return {"caption": value}


def _common(mode: str) -> dict:
    return {"task": TASK, "temperature": 0.0, "max_tokens": OFFICIAL_MAX_TOKENS if mode == "official" else 512}


def extract_ask(kind: str, mode: str, source_id: str, video_id: str, caption: str) -> Ask:
    """Ask for the objects (kind "objects") or actions ("actions") of one ground-truth caption."""
    official = mode == "official"
    return Ask(item_id=source_id, video_id=video_id, prompt_id=f"augment/{EXTRACT[kind]}",
               fields={"cap": caption if official else fence("caption", caption)},
               json_schema=None if official else _schema(kind, "list"),
               backend_fields={"caption": caption}, context={"key": kind, "data": [caption]}, **_common(mode))


def replace_ask(kind: str, mode: str, source_id: str, video_id: str, index: int, element: str) -> Ask:
    """Ask for an alternative to one extracted element (sub_index = its index in the extracted list)."""
    official = mode == "official"
    slot = "obj" if kind == "objects" else "act"
    fields = {slot: element if official else fence("element", element)}
    common = _common(mode) | ({} if official else {"max_tokens": 64})
    return Ask(item_id=source_id, video_id=video_id, prompt_id=f"augment/{REPLACE[kind]}", sub_index=index,
               fields=fields, json_schema=None if official else _schema("replacement", "text"),
               backend_fields={"element": element, "kind": kind}, context={"original": element, "data": [element]},
               **common)


def substitute_ask(mode: str, candidate_id: str, video_id: str, round_: int, caption: str, old: str,
                   new_raw: str) -> Ask:
    """Ask for `caption` with `old` replaced by `new_raw` (sub_index = the substitution's place in the chain)."""
    official = mode == "official"
    fields = ({"cap": caption, "ow": old, "nw": new_raw} if official else
              {"cap": fence("caption", caption), "ow": json.dumps(old, ensure_ascii=False),
               "nw": json.dumps(new_raw.strip(), ensure_ascii=False)})
    return Ask(item_id=candidate_id, video_id=video_id, prompt_id=f"augment/{SUBSTITUTE}", sub_index=round_,
               fields=fields, json_schema=None if official else _schema("caption", "text"),
               backend_fields={"caption": caption, "old": old, "new": new_raw.strip()},
               context={"before": caption, "new": new_raw, "data": [caption, old]}, **_common(mode))
