"""CAPability prompts rendered from a pack: with the official pack (../shared/protocols/capability.toml, read in
place) the requests equal, byte for byte, the pack's own rendering rule — system = role_system and
user.format(**fields) with the fields its `placeholders` describe — for every item of the 13 annotation files with
the released captions of both models (dynamic_object_number: one prompt per object). The expected fields are
written out here from the placeholder descriptions, independently of engine/protocols/capability/prompts.py."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.protocols.capability.release import load_captions, load_items
from capeval.engine.protocols.capability import PROTOCOL
from capeval.engine.protocols.capability.codes import CLASSIFICATION_TASKS, TASKS

PACK = Path(__file__).resolve().parents[2].parent / "shared" / "protocols" / "capability.toml"
MODELS = ("gpt-4o-0806", "qwen2.5vl_7b")
#: the placeholder that receives a text annotation, per task (from the pack's placeholder table)
TEXT_SLOT = {"event": "event", "action": "action", "object_category": "object", "spatial_relation": "spatial_relation",
             "scene": "scene", "OCR": "ocr_text", "character_identification": "name"}


def _expected(prompt: dict, task: str, caption: str, anno) -> list[tuple[str, str]]:
    user, system = prompt["user"], prompt["role_system"]
    if task in CLASSIFICATION_TASKS:
        return [(system, user.format(caption=caption))]
    if task in ("object_number", "dynamic_object_number"):
        pairs = list(anno.items()) if task == "dynamic_object_number" else list(anno.items())[:1]
        return [(system, user.format(caption=caption, object=k, number=f"{v}")) for k, v in pairs]
    if task == "object_color":
        k, v = next(iter(anno.items()))
        return [(system, user.format(caption=caption, object=k, color=v))]
    return [(system, user.format(caption=caption, **{TEXT_SLOT[task]: anno}))]


@pytest.fixture(scope="module")
def official_pack():
    if not PACK.is_file():
        pytest.skip(f"official pack {PACK} not present")
    return {p["id"]: p for p in tomllib.loads(PACK.read_text(encoding="utf-8"))["prompt"]}


@pytest.mark.parametrize("model", MODELS)
def test_official_pack_renders_byte_for_byte(shared_data, official_pack, model):
    root = shared_data / "capability"
    items = load_items(root / "annotations")
    captions = load_captions(root / "captions" / model, items)
    requests = PROTOCOL.build_requests(items, captions, judge="j", judge_revision="r", mode="official",
                                       prompts=str(PACK))
    got = {(r["task"], r["item_id"], r["sub_index"]): (r["system"], r["user"])
           for r in requests.select(["task", "item_id", "sub_index", "system", "user"]).to_pylist()}
    n = mismatched = 0
    for task in TASKS:
        cap_file = root / "captions" / model / f"{'event' if task == 'action' else task}.jsonl"
        caption_of = {r["file_id"]: r["caption"] for r in map(json.loads, cap_file.read_text("utf-8").splitlines())}
        for line in (root / "annotations" / f"{task}.jsonl").read_text("utf-8").splitlines():
            rec = json.loads(line)
            for sub, want in enumerate(_expected(official_pack[f"judge/{task}"], task, caption_of[rec["file_id"]],
                                                 rec["annotation"])):
                n += 1
                mismatched += got.get((task, rec["file_id"], sub)) != want
    assert mismatched == 0, f"{mismatched} of {n} prompts differ"
    assert n == requests.num_rows  # nothing extra was rendered
    assert n > 11_631  # one prompt per object for dynamic_object_number


def _one_item_tables(shared_data, task="object_number"):
    root = shared_data / "capability"
    items = load_items(root / "annotations", tasks=[task])
    items = items.slice(0, 3)
    return items, load_captions(root / "captions" / "gpt-4o-0806", items)


def test_pack_digest_enters_every_request_key(shared_data, tmp_path):
    items, captions = _one_item_tables(shared_data)
    own = PROTOCOL.build_requests(items, captions, judge="j", judge_revision="r")
    again = PROTOCOL.build_requests(items, captions, judge="j", judge_revision="r")
    assert own["request_key"].to_pylist() == again["request_key"].to_pylist()
    # a copy of capeval's own pack with one changed byte in a comment: same prompts, different pack -> new keys
    from capeval.engine.packs import builtin_pack_path

    copy = tmp_path / "pack.toml"
    copy.write_text(builtin_pack_path("capability").read_text() + "\n# edited\n")
    other = PROTOCOL.build_requests(items, captions, judge="j", judge_revision="r", prompts=str(copy))
    assert other["user"].to_pylist() == own["user"].to_pylist()
    assert not set(other["request_key"].to_pylist()) & set(own["request_key"].to_pylist())


def test_own_pack_renders_every_task_and_structured_only_in_strict(shared_data, monkeypatch):
    root = shared_data / "capability"
    items = load_items(root / "annotations")
    items = pl.from_arrow(items).group_by("task", maintain_order=True).head(100).to_arrow()
    captions = load_captions(root / "captions" / "gpt-4o-0806", items)
    strict = PROTOCOL.build_requests(items, captions, judge="j", judge_revision="r", structured="true")
    assert set(strict["task"].to_pylist()) == set(TASKS)
    assert all(s is not None for s in strict["json_schema"].to_pylist())
    for r in strict.to_pylist()[:50]:
        assert "{caption}" not in r["user"] and r["user"].count("{") >= 1
    for judge, structured in (("j", "false"), ("gpt-4-turbo", None)):  # off on request / for a judge without schemas
        plain = PROTOCOL.build_requests(items.slice(0, 20), captions, judge=judge, judge_revision="r",
                                        structured=structured)
        assert all(s is None for s in plain["json_schema"].to_pylist())
    monkeypatch.delenv("CAPEVAL_PACKS", raising=False)
    with pytest.raises(ValueError, match="official mode needs"):  # the official texts are not shipped
        PROTOCOL.build_requests(items.slice(0, 2), captions, judge="j", judge_revision="r", mode="official")
