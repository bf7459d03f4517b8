"""The `vdc` dataset kind on AuroraCap's released question sets (../shared/data/vdc/<kind>.jsonl, read in place):
counts, the ids main_object.jsonl names twice (the last line wins, as the official `dict.update`, and is reported)
or lacks, the folder form and `kinds`, and errors naming file, line and field on malformed files written here."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from capeval.engine.datasets.jsonl import DatasetFormatError
from capeval.engine.datasets.registry import load, validate
from capeval.engine.protocols.vdc.release import KINDS, is_release_file, load_vdc, read_qa_file
from capeval.engine.registry import lookup

# main_object.jsonl's ids on two lines (1-based lines); the first two with different questions
TWICE_DIFFERENT = {"056ca2389ab78e72845916ddd54baba871f26c009591c3715e1abb9fa59b526f": [65, 415],
                   "01ff5bb49c2ff92fa41f98dbd1da45a4e9653d215161de8f58647e87af7daddd": [113, 440]}
TWICE_SAME = {"03f46720-8327-4215-ba56-5d739f6795ef": [1007, 1009],
              "mixkit-old-abandoned-and-destroyed-cabin-in-the-undergrowth-5297": [1008, 1010]}
NOT_IN_MAIN_OBJECT = {"699b3cf7c5b6fc1187aa829ea8e5795b27a06a811fe63d4e9c78e50d87a3c21c", "JJshlR5WkrY"}


@pytest.fixture(scope="module")
def vdc_folder(shared_data) -> Path:
    return shared_data / "vdc"


@pytest.fixture(scope="module")
def all_items(vdc_folder):
    return load("vdc", {"path": str(vdc_folder)}).items


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_release_counts_as_its_meta_states(vdc_folder, all_items):
    """1,027 video ids and 96,902 QA pairs over the five files' lines; the items are the lists judged: 96,825 pairs,
    the 77 pairs of main_object's replaced lines left out (the number of prompts the official script sent)."""
    files = [read_qa_file(vdc_folder / f"{k}.jsonl", k) for k in KINDS]
    assert sum(f.n_pairs_read for f in files) == 96_902
    assert len({vid for f in files for vid in f.videos}) == 1_027
    assert all_items.num_rows == 96_825
    assert len(set(all_items.column("video_id").to_pylist())) == 1_027
    per_kind = {k: all_items.column("task").to_pylist().count(k) for k in KINDS}
    assert per_kind == {"short": 19_512, "detailed": 19_811, "background": 19_156, "main_object": 19_234,
                        "camera": 19_112}
    assert set(all_items.column("benchmark").to_pylist()) == {"vdc"}
    assert len(set(all_items.column("item_id").to_pylist())) == all_items.num_rows


def test_one_row_per_pair_with_the_designed_columns(vdc_folder, all_items):
    first_line = _lines(vdc_folder / "camera.jsonl")[0]
    (video_id, qa_list), = first_line.items()
    camera = all_items.filter(pc.equal(all_items.column("task"), "camera"))
    rows = [r for r in camera.to_pylist() if r["video_id"] == video_id]
    assert len(rows) == len(qa_list)
    for n, (row, qa) in enumerate(zip(rows, qa_list)):
        assert row["item_id"] == f"camera/{video_id}/{n:02d}"
        assert (row["annotation"], row["answer"], row["category"]) == (qa["question"], qa["answer"], qa["category"])
        assert json.loads(row["extra"]) == {"qa_index": n, "n_questions": len(qa_list), "line": 1}
        assert row["media_type"] == "video"


def test_main_object_ids_on_two_lines_are_judged_with_the_last_line_and_reported(vdc_folder, capsys):
    path = vdc_folder / "main_object.jsonl"
    qa = read_qa_file(path, "main_object")
    assert qa.duplicates == {**TWICE_DIFFERENT, **TWICE_SAME}
    lines = _lines(path)
    items = load("vdc", {"path": str(path)}).items.to_pylist()
    warning = capsys.readouterr().err
    for vid, (first, last) in {**TWICE_DIFFERENT, **TWICE_SAME}.items():
        rows = [r for r in items if r["video_id"] == vid]
        expected = lines[last - 1][vid]  # the last line's list, not a merge of both
        assert [r["annotation"] for r in rows] == [q["question"] for q in expected]
        assert all(json.loads(r["extra"])["line"] == last for r in rows)
        assert all(json.loads(r["extra"])["replaced_lines"] == [first] for r in rows)
        assert f"{vid} on lines {first}, {last}" in warning
    for vid, (first, last) in TWICE_DIFFERENT.items():
        assert [q["question"] for q in lines[first - 1][vid]] != [q["question"] for q in lines[last - 1][vid]]
        assert f"{vid} on lines {first}, {last} (different questions)" in warning
    for vid, (first, last) in TWICE_SAME.items():
        assert f"{vid} on lines {first}, {last} (same questions)" in warning
    # the id keeps the place of its first line (dict.update keeps a key's position)
    order = list(dict.fromkeys(r["video_id"] for r in items))
    first_seen = list(dict.fromkeys(vid for rec in lines for vid in rec))
    assert order == first_seen


def test_ids_main_object_lacks_are_reported_in_the_folder_form(all_items, vdc_folder, capsys):
    load("vdc", {"path": str(vdc_folder)})
    err = capsys.readouterr().err
    assert "main_object.jsonl: 2 video id(s) of the other kinds have no main_object questions" in err
    for vid in NOT_IN_MAIN_OBJECT:
        assert vid in err
        kinds = {t for t, v in zip(all_items.column("task").to_pylist(), all_items.column("video_id").to_pylist())
                 if v == vid}
        assert kinds == set(KINDS) - {"main_object"}


def test_kinds_picks_files_of_the_folder_and_media_default_to_it(vdc_folder, tmp_path):
    loaded = load("vdc", {"path": str(vdc_folder), "kinds": ["camera", "short"]})
    assert set(loaded.items.column("task").to_pylist()) == {"camera", "short"}
    assert loaded.items.num_rows == 19_512 + 19_112
    vid = loaded.items.column("video_id")[0].as_py()
    assert loaded.media[vid] == str(vdc_folder / f"{vid}.mp4")  # named by id, under the folder (none shipped here)
    (tmp_path / f"{vid}.webm").write_bytes(b"\x1a\x45\xdf\xa3")
    loaded = load("vdc", {"path": str(vdc_folder), "kinds": ["short"], "media_root": str(tmp_path)})
    assert loaded.media[vid] == str(tmp_path / f"{vid}.webm")
    # staging ships exactly the files the loader reads
    kind = lookup("dataset_kind", "vdc")
    assert kind.files_in_folder(vdc_folder, {"kinds": ["short", "camera"]}) == [vdc_folder / "short.jsonl",
                                                                                vdc_folder / "camera.jsonl"]
    assert kind.files_in_folder(vdc_folder, {}) == [vdc_folder / f"{k}.jsonl" for k in KINDS]
    assert is_release_file(vdc_folder) and is_release_file(vdc_folder / "short.jsonl")
    assert not is_release_file(tmp_path)


def test_a_file_named_otherwise_takes_its_kind_from_kinds(vdc_folder, tmp_path):
    copy = tmp_path / "my_questions.jsonl"
    copy.write_text("\n".join((vdc_folder / "camera.jsonl").read_text().splitlines()[:3]) + "\n")
    items = load("vdc", {"path": str(copy), "kinds": ["camera"]}).items
    assert set(items.column("task").to_pylist()) == {"camera"}
    assert items.column("item_id")[0].as_py().startswith("camera/")
    assert validate("vdc", {"path": str(copy)}, tmp_path) == [
        'path: my_questions.jsonl: the file\'s name is not a kind\'s (short.jsonl, detailed.jsonl, '
        'background.jsonl, main_object.jsonl, camera.jsonl); say which kind its questions are with '
        '`kinds = ["<kind>"]`']
    # a kind's file with other kinds named: refused, not silently relabelled
    problems = validate("vdc", {"path": str(vdc_folder / "short.jsonl"), "kinds": ["camera"]})
    assert len(problems) == 1 and "holds the 'short' questions" in problems[0]


def test_params_are_checked_before_loading(vdc_folder, tmp_path):
    assert validate("vdc", {"path": str(vdc_folder), "kinds": ["short", "long"]}) == [
        "kinds: unknown kind(s) 'long' (choose from short, detailed, background, main_object, camera)"]
    assert validate("vdc", {"path": str(vdc_folder), "kinds": []})[0].startswith("kinds: empty list")
    assert validate("vdc", {"path": str(tmp_path)}) == [
        f"path: {tmp_path}: no VDC QA file (short.jsonl, detailed.jsonl, background.jsonl, main_object.jsonl, "
        f"camera.jsonl)"]
    (tmp_path / "short.jsonl").write_text('{"v1": [{"question": "q", "answer": "a", "category": ""}]}\n')
    assert validate("vdc", {"path": str(tmp_path), "kinds": ["short", "camera"]}) == [
        f"path: {tmp_path}: no camera.jsonl"]
    assert validate("vdc", {"path": str(tmp_path)}) == []
    assert load("vdc", {"path": str(tmp_path)}).items.column("item_id").to_pylist() == ["short/v1/00"]
    assert validate("vdc", {"kinds": ["short"]}) == ["path: required for dataset kind 'vdc' (one kind's QA file "
                                                     "(<kind>.jsonl), or the folder holding them)"]


@pytest.mark.parametrize("lines, line, field, message", [
    (['{"v1": [{"question": "q", "answer": "a", "category": ""}]}', '{"v2": [{"question": "q", "answer": "a"'],
     2, None, "malformed JSON"),
    (['{"v1": {"question": "q"}}'], 1, "v1", "expected the video's QA list (an array), got dict"),
    (['{"v1": [{"question": "q", "answer": "a", "category": ""}]}', '',
      '{"v2": [{"question": "q", "answer": "a"}, {"answer": "a"}]}'], 3, "v2[1].question", "missing"),
    (['{"v1": [{"question": "q", "answer": ["a"], "category": ""}]}'], 1, "v1[0].answer",
     "expected string or integer or number, got array"),
    (['{"v1": [{"question": "q", "answer": "a", "category": 3}]}'], 1, "v1[0].category",
     "expected string, got integer"),
    (['{"v1": ["what?"]}'], 1, "v1[0]", "expected an object, got str"),
    (['["v1"]'], 1, None, "expected a JSON object, got list"),
    (['{}'], 1, None, "expected an object mapping a video id to its QA list"),
])
def test_malformed_files_name_file_line_and_field(tmp_path, lines, line, field, message):
    path = tmp_path / "detailed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetFormatError) as err:
        load_vdc(path)
    assert (err.value.path, err.value.line, err.value.field) == (str(path), line, field)
    assert str(err.value).startswith(f"{path}:{line}: " + (f"field {field!r}: " if field else ""))
    assert message in str(err.value)


def test_numbers_as_answers_are_their_text_and_empty_lists_give_no_items(tmp_path, capsys):
    path = tmp_path / "short.jsonl"
    path.write_text('{"v1": [{"question": "How many?", "answer": 3, "category": "count"}], "v2": []}\n')
    items = load_vdc(path).to_pylist()
    assert [(r["item_id"], r["answer"], r["category"]) for r in items] == [("short/v1/00", "3", "count")]
    assert "1 video id(s) with an empty QA list give no items" in capsys.readouterr().err
