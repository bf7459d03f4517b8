"""User mistakes end with exit 2 and a message naming the file, line or option -- never "internal error" (exit 1), a
plan computed from nan, a problem hidden behind another, the same problem twice, or a sweep that silently does
nothing (issue 26, item 9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capeval.engine.cli import main as cli_main
from capeval.engine.exitcodes import USAGE
from capeval.engine.sweep.config import SweepFileError, load_sweep


def _captions(folder: Path, video: str = "v") -> Path:
    p = folder / "caps.jsonl"
    p.write_text(json.dumps({"video_id": video, "caption": "A red ball rolls."}) + "\n")
    return p


def test_a_release_annotation_file_that_is_not_utf8_is_named_by_line(tmp_path, capsys):
    record = {"file_id": "a.mp4", "file_path": "a.mp4", "data_type": "video", "task": "object_category",
              "annotation": "a ball"}
    second = dict(record, file_id="b.mp4", file_path="b.mp4", annotation="caf\u00e9")  # saved as Latin-1 below
    table = tmp_path / "object_category.jsonl"
    table.write_bytes(json.dumps(record).encode() + b"\n" + json.dumps(second, ensure_ascii=False).encode("latin-1")
                      + b"\n")
    rc = cli_main(["judge", "--protocol", "capability", "--items", str(table),
                   "--captions", str(_captions(tmp_path, "a.mp4")), "--judge", "local",
                   "--out", str(tmp_path / "v.parquet"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == USAGE, err
    assert "internal error" not in err and f"{table}:2: not UTF-8" in err, err


def test_a_sweep_file_that_is_not_utf8_is_a_usage_error_for_check_and_plan(tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_bytes(b'name = "caf\xe9"\n[[datasets]]\nname = "d"\nkind = "synthetic"\n')
    with pytest.raises(SweepFileError, match="line|:1: not UTF-8"):
        load_sweep(path)
    assert cli_main(["sweep", str(path), "--check"]) == USAGE
    assert cli_main(["plan", str(path)]) == USAGE
    err = capsys.readouterr().err
    assert "internal error" not in err and err.count(f"{path}:1: not UTF-8 text (byte 0xe9") == 2, err


def test_plan_refuses_a_rate_that_is_not_a_finite_number(tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text('name = "p"\n[[datasets]]\nname = "d"\nkind = "synthetic"\nn_videos = 1\n'
                    f'[[captions]]\npath = "{_captions(tmp_path)}"\n[[protocols]]\nname = "capquiz"\n'
                    '[[judges]]\nname = "local"\n')
    for rate in ("nan", "inf"):
        with pytest.raises(SystemExit) as info:
            cli_main(["plan", str(path), "--rate", rate])
        assert info.value.code == USAGE
        assert f"--rate: must be a finite number above 0, got '{rate}'" in capsys.readouterr().err


def test_bench_judge_says_why_a_protocol_gives_no_requests(tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"item_id": "q1", "video_id": "v", "task": "action", "question": "What moves?",
                                 "options": ["a ball", "a cat"], "answer": "a ball"}) + "\n")
    base = ["bench", "judge", "--judge", "openai", "--base-url", "http://127.0.0.1:9/v1", "--judge-model", "m",
            "--items", str(items)]
    assert cli_main(base + ["--protocol", "vcinspector"]) == USAGE
    err = capsys.readouterr().err
    assert "internal error" not in err and "its judge sees the videos' frames" in err, err
    assert cli_main(base + ["--protocol", "capquiz", "--captions", str(_captions(tmp_path, "other"))]) == USAGE
    err = capsys.readouterr().err
    assert "no judge requests for protocol 'capquiz'" in err and "no caption for this video" in err, err


def test_a_dataset_entry_with_a_type_error_still_shows_its_other_problems_and_seeds_once(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('name = "t"\n[[datasets]]\nname = 5\nkind = "synthetic"\nn_videos = "x"\nlimit = 0\n'
                    f'[[captions]]\npath = "{_captions(tmp_path)}"\n[[protocols]]\nname = "capquiz"\n'
                    '[[judges]]\nname = "local"\nseeds = 5\n')
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    problems = info.value.problems
    for field in ("datasets[0].name", "datasets[0].n_videos", "datasets[0].limit", "judges[0].seeds"):
        assert sum(f": {field}:" in p for p in problems) == 1, (field, problems)
    assert len(problems) == 4, problems


def test_a_sweep_with_only_caption_files_and_nothing_to_do_is_refused(tmp_path, capsys, monkeypatch):
    path = tmp_path / "sweep.toml"
    path.write_text('name = "idle"\n[[datasets]]\nname = "d"\nkind = "synthetic"\nn_videos = 1\n'
                    f'[[captions]]\npath = "{_captions(tmp_path)}"\n')
    monkeypatch.chdir(tmp_path)
    assert cli_main(["sweep", str(path), "--check"]) == USAGE
    assert cli_main(["sweep", str(path), "--no-progress"]) == USAGE
    err = capsys.readouterr().err
    assert err.count(f"{path}, line 6: captions[0]: nothing to do") == 2, err
    assert not (tmp_path / "runs").exists()
