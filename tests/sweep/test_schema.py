"""The sweep file's schema is written once, as the dataclasses of engine/sweep/config.py: the parser's key tables
are derived from them (types, required keys, which table takes which field), and docs/inputs.md's sweep-file block
names every key of every table."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from capeval.engine.sweep import config as sweep_config
from capeval.engine.sweep.config import (CaptionSource, ComponentSpec, DatasetSpec, SweepConfig, SweepOptions,
                                         file_keys, parse_sweep)
from capeval.engine.sweep.checker import SweepFileError

INPUTS_DOC = Path(__file__).resolve().parents[2] / "docs" / "inputs.md"

#: each table of a sweep file and the keys it takes (the dataclass and, for a shared class, the table's name)
TABLES = {"": file_keys(SweepConfig), "datasets": file_keys(DatasetSpec),
          "captioners": file_keys(ComponentSpec, "captioners"), "judges": file_keys(ComponentSpec, "judges"),
          "protocols": file_keys(ComponentSpec, "protocols"), "captions": file_keys(CaptionSource),
          "options": file_keys(SweepOptions)}


def test_the_key_tables_follow_the_dataclasses():
    assert TABLES[""] == {"name": (str, True), "datasets": (list, True), "captioners": (list, False),
                          "prompts": (list, False), "frames": (list, False), "protocols": (list, False),
                          "judges": (list, False), "options": (dict, False), "captions": (list, False)}
    assert TABLES["datasets"] == {"name": (str, True), "kind": (str, True), "limit": (int, False)}
    assert TABLES["captioners"] == {"name": (str, True), "params": (dict, False), "label": (str, False),
                                    "max_tokens": (int, False), "timestamps": (str, False),
                                    "frame_size": ((int, str), False), "prices": (dict, False)}
    assert set(TABLES["judges"]) == {"name", "params", "seeds", "label", "prices", "validated"}
    assert set(TABLES["protocols"]) == {"name", "params", "label", "datasets", "judges"}
    assert TABLES["options"]["gpus_per_actor"] == ((int, float), False)  # a float field takes an int too
    assert TABLES["options"]["breakdowns"] == (list, False) and TABLES["options"]["decide"] == (dict, False)
    # what the parser checks is what the dataclasses say
    assert sweep_config._OPTIONS == TABLES["options"] and sweep_config._CAPTIONER == TABLES["captioners"]


def test_a_key_no_dataclass_declares_is_refused_naming_file_line_and_field(tmp_path):
    text = 'name = "s"\n[[datasets]]\nname = "d"\nkind = "synthetic"\n[[captioners]]\nname = "local"\n' \
           'prompts = ["brief"]\nframes = ["uniform:2"]\n[options]\nnot_an_option = 1\n'
    path = tmp_path / "s.toml"
    with pytest.raises(SweepFileError, match=r"s\.toml, line 10: options\.not_an_option: unknown key"):
        parse_sweep(tomllib.loads(text), path=path, text=text, check_registry=False, check_paths=False)


def _sweep_block() -> str:
    text = INPUTS_DOC.read_text(encoding="utf-8")
    section = text[text.index("## Sweep files"):]
    return section[section.index("```toml") + len("```toml"):section.index("```", section.index("```toml") + 7)]


def _table_text(block: str, table: str) -> str:
    """The lines of `[[table]]` / `[table]` and the comment lines that continue it."""
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"\[\[?{table}\]\]?\s", line + " "))
    out = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith(" "):
            break
        out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize("table", [t for t in TABLES if t])
def test_the_docs_name_every_key_of_every_table(table):
    text = _table_text(_sweep_block(), table)
    missing = [k for k in TABLES[table] if not re.search(rf"\b{k}\b", text)]
    assert not missing, f"docs/inputs.md, sweep files, [{table}]: keys not documented: {missing}"


def test_the_docs_name_every_top_level_key():
    block = _sweep_block()
    missing = [k for k in TABLES[""] if not re.search(rf"^(\[\[?)?{k}(\]\]?| =)", block, re.M)]
    assert not missing, f"docs/inputs.md, sweep files: top-level keys not shown: {missing}"
