"""CapQuiz resolves its prompt pack once per request table (build_requests hands it to every render), and a pack
file is read again when it changes or when a relative name means another file (another working folder)."""

from __future__ import annotations

import shutil

import pyarrow as pa

from capeval.engine import packs
from capeval.engine.protocols.capquiz import CapQuizProtocol
from capeval.engine.protocols.capquiz import prompts as capquiz_prompts


def _tables(n: int) -> tuple[pa.Table, pa.Table]:
    from capeval.engine.schemas import CAPTIONS, ITEMS

    options = [f"option {k}" for k in range(5)]
    items = [{"benchmark": "capquiz", "task": "scene", "item_id": f"v{i}/scene", "video_id": f"v{i}",
              "media_type": "video", "annotation": "which?", "options": options, "answer": options[i % 5]}
             for i in range(n)]
    captions = [{"video_id": f"v{i}", "text": f"caption {i}", "captioner": "given", "prompt_id": "p",
                 "frame_spec": "f", "caption_key": f"c{i}"} for i in range(n)]
    return (pa.Table.from_pylist([{f.name: r.get(f.name) for f in ITEMS} for r in items], schema=ITEMS),
            pa.Table.from_pylist([{f.name: r.get(f.name) for f in CAPTIONS} for r in captions], schema=CAPTIONS))


def test_build_requests_resolves_the_pack_once(monkeypatch):
    items, captions = _tables(20)
    resolved = []
    original = capquiz_prompts.pack_for

    def counted(*args, **kwargs):
        resolved.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(capquiz_prompts, "pack_for", counted)
    table = CapQuizProtocol().build_requests(items, captions, judge="j", judge_revision="r", seeds=(0, 1))
    assert table.num_rows == 40 and len(resolved) == 1
    # the rows are those a render that resolves the pack itself makes
    item, caption = items.to_pylist()[0], captions.to_pylist()[0]
    assert (capquiz_prompts.render(item, caption, seed=0)[0].user
            == capquiz_prompts.render(item, caption, seed=0, pack=original("strict"))[0].user)


def test_a_pack_file_is_read_again_when_it_changes_or_names_another_file(tmp_path, monkeypatch):
    builtin = packs.builtin_pack_path("capquiz")
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        shutil.copy(builtin, tmp_path / name / "pack.toml")
    with (tmp_path / "b" / "pack.toml").open("a") as f:
        f.write("\n# another version\n")
    monkeypatch.chdir(tmp_path / "a")
    first = packs.load_pack("pack.toml")
    assert packs.load_pack("pack.toml") is first and first.path == (tmp_path / "a" / "pack.toml").resolve()
    monkeypatch.chdir(tmp_path / "b")
    second = packs.load_pack("pack.toml")  # the same name, another folder: another file
    assert second.path == (tmp_path / "b" / "pack.toml").resolve() and second.digest != first.digest
    (tmp_path / "b" / "pack.toml").write_text(builtin.read_text() + "\n# changed again, longer\n")
    assert packs.load_pack("pack.toml").digest != second.digest
