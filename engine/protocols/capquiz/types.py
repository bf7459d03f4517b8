"""CapQuiz question types -> groups (Descriptive / Inferential).

The default map is the `[[question_type]]` table of capeval's own pack (the paper's ten type names; `inferred =
true` marks the groups the paper's text does not state). The protocol param `type_families` overrides it, from
the CLI (`--param type_families=...`) or a sweep file (`protocols[].params.type_families`), as:
  * a mapping {type name: group};
  * JSON text of such a mapping, or of a list of {"name", "group"[, "inferred"]};
  * a path to a .json file holding either, or a .toml file with `[[question_type]]` tables (the pack layout) or a
    plain table of name = group.
Names match case-insensitively, with spaces, dashes, underscores and "&"/"and" treated alike, and a trailing "Reasoning" optional ("Causal" = "Causal Reasoning"). A type that is not in
the map is reported as group "unmapped", never dropped.
"""

from __future__ import annotations

import json
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from capeval.engine.packs import builtin_pack_path, load_pack

GROUPS = ("Descriptive", "Inferential")
UNMAPPED = "unmapped"


def normalize_type(name: str | None) -> str:
    if name is None:
        return ""
    text = name.strip().lower().replace("&", " and ").replace("-", " ").replace("_", " ").split()
    if len(text) > 1 and text[-1] == "reasoning":  # "Causal" and "Causal Reasoning" name one type
        text = text[:-1]
    return "_".join(text)


@lru_cache(maxsize=1)
def builtin_types() -> tuple[dict, ...]:
    return tuple(load_pack(builtin_pack_path("capquiz")).table("question_type"))


def _from_entries(entries: list, where: str) -> dict[str, tuple[str, bool]]:
    out = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not isinstance(e.get("group"), str):
            raise ValueError(f"{where}: entry #{i + 1} needs text fields 'name' and 'group', got {e!r}")
        out[e["name"]] = (e["group"], bool(e.get("inferred", False)))
    return out


def _from_value(value: Any, where: str) -> dict[str, tuple[str, bool]]:
    if isinstance(value, dict):
        if isinstance(value.get("question_type"), list):
            return _from_entries(value["question_type"], where)
        bad = {k: v for k, v in value.items() if not isinstance(v, str)}
        if bad:
            raise ValueError(f"{where}: each type must map to a group name (text); not {bad}")
        return {k: (v, False) for k, v in value.items()}
    if isinstance(value, list):
        return _from_entries(value, where)
    raise ValueError(f"{where}: expected a mapping {{type: group}} or a list of {{name, group}}, got "
                     f"{type(value).__name__}")


def load_type_map(spec: Any = None) -> dict[str, tuple[str, bool]]:
    """{type name: (group, inferred)} from a `type_families` param value (see the module docstring)."""
    if spec is None:
        return _from_entries(list(builtin_types()), "capeval's capquiz pack")
    if isinstance(spec, (dict, list)):
        return _from_value(spec, "type_families")
    if isinstance(spec, (str, Path)):
        text = str(spec).strip()
        if text[:1] in "{[":
            try:
                return _from_value(json.loads(text), "type_families (JSON)")
            except json.JSONDecodeError as exc:
                raise ValueError(f"type_families: not valid JSON: {exc}") from None
        path = Path(text).expanduser()
        if not path.is_file():
            raise ValueError(f"type_families: {text!r} is neither a mapping, JSON text nor an existing file")
        raw = path.read_text(encoding="utf-8")
        try:
            value = tomllib.loads(raw) if path.suffix.lower() == ".toml" else json.loads(raw)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: type_families file cannot be read: {exc}") from None
        return _from_value(value, str(path))
    raise ValueError(f"type_families: unsupported value {spec!r}")


def group_lookup(spec: Any = None):
    """(type name -> group or "unmapped", type name -> inferred flag or None) for a `type_families` value."""
    table = {normalize_type(k): v for k, v in load_type_map(spec).items()}

    def group(name: str | None) -> str:
        return table.get(normalize_type(name), (UNMAPPED, None))[0]

    def inferred(name: str | None) -> bool | None:
        return table.get(normalize_type(name), (None, None))[1]

    return group, inferred
