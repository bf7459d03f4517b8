"""`capeval judge --items FOLDER` without --dataset detects the folder's kind from the protocols' release layouts.
CAPability claimed EVERY folder, so the VDC question-set folder (and any other benchmark's) was read as CAPability
annotations; it now claims only a folder whose task files are CAPability's records."""

from __future__ import annotations

import json
from pathlib import Path

from capeval.engine.judge_run.inputs import release_kind


def test_a_vdc_question_folder_is_not_claimed_by_capability(tmp_path: Path):
    folder = tmp_path / "vdc"
    folder.mkdir()
    (folder / "detailed.jsonl").write_text(json.dumps({"v1": [{"question": "What color?", "answer": "red"}]}) + "\n")
    assert release_kind(folder) == "vdc"


def test_a_capability_annotations_folder_is_still_claimed(tmp_path: Path):
    folder = tmp_path / "annotations"
    folder.mkdir()
    (folder / "scene.jsonl").write_text(json.dumps({"file_id": "a", "file_path": "videos/a.mp4", "data_type": "video",
                                                    "annotation": "a kitchen", "task": "scene"}) + "\n")
    assert release_kind(folder) == "capability"


def test_a_folder_of_neither_is_an_items_folder(tmp_path: Path):
    (tmp_path / "x").mkdir()
    assert release_kind(tmp_path / "x") == "items"
