"""Strict mode differs from official mode by design, within one bound: on every case of the parse oracle it never
accepts a reply the official validator rejected, and where both accept, the verdicts agree. (It may read replies the
official parser could not -- prose around the JSON, JSON literals -- and it re-asks a few the official rules accept:
boolean scores, lists mixing N/A with categories, a dict as `pred`.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from capeval.engine.packs import load_pack
from capeval.engine.protocols.capability.official import code_of
from capeval.engine.protocols.capability.parsing import parse_strict
from capeval.engine.protocols.capability.prompts import categories
from capeval.engine.schemas import ParseStatus


def _conftest():
    spec = importlib.util.spec_from_file_location("_fidelity_conftest_capability_strict",
                                                  Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_C = _conftest()
CASES = _C.oracle_cases("capability_parse_oracle.jsonl")


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_strict_never_accepts_what_the_official_validator_rejects(case):
    pack = load_pack(_C.PACK_DIR / "capability.toml")
    task, anno = case["task"], case["annotation"]
    objs = [dict([p]) for p in anno.items()] if task == "dynamic_object_number" else [anno]
    ctx = {"mode": "strict", "task": task}
    if task in ("camera_angle", "camera_movement", "style"):
        cats = categories(pack, task)
        ctx.update(names=list(cats.names), explains=list(cats.explains))
    outs = [parse_strict(task, text, {**ctx, "annotation": a}) for text, a in zip(case["replies"], objs)]
    accepted = all(o[1] != ParseStatus.FAILED for o in outs)
    official = case["official"]
    if official["status"] == "rejected" and official["stage"] == "validate":
        assert not accepted, (case["case"], outs)
    if accepted and official["status"] == "scored":
        scores = official["score"] if isinstance(official["score"], list) else [official["score"]]
        assert [o[0] for o in outs] == [code_of(s) for s in scores], case["case"]


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_official_item_outcome_api(case):
    """capeval.engine.protocols.capability.official.item_outcome: the official outcome of one item's raw replies, as a
    library call (no judge loop), with the value the official script stores (True, 1.0 kept as such)."""
    from capeval.engine.protocols.capability import official

    pack = load_pack(_C.PACK_DIR / "capability.toml")
    cats = categories(pack, case["task"]) if case["task"] in ("camera_angle", "camera_movement", "style") else None
    for variant, strict_match in (("official", False), ("official_strict_match", True)):
        expected = case[variant]
        try:
            got = official.item_outcome(case["replies"], case["task"], case["annotation"], strict_match=strict_match,
                                        categories=cats)
        except official.Rejected as exc:
            assert expected["status"] == "rejected" and exc.stage == expected["stage"], (variant, str(exc))
            continue
        assert expected["status"] == "scored" and got == expected["score"], (variant, got)
        assert repr(got) == expected.get("score_repr", repr(expected["score"]))
