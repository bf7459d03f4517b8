"""Items a protocol cannot render are usage errors (exit 2) before any work, naming the table's file, row and column,
and the columns that capeval does not read (kept in `extra`): a CapQuiz table with `choices` instead of `options`
used to stop `capeval judge` with "internal error ... expected 2-9 options, got 0", and an `answer` that is none of
its options passed `sweep --check`, then crashed the sweep after captioning with no run record."""

from __future__ import annotations

import json
from pathlib import Path

from capeval.engine.cli import main as cli_main
from capeval.engine.exitcodes import USAGE


def _item(item_id: str, **over) -> dict:
    return {"item_id": item_id, "video_id": "v", "task": "action", "question": "What moves?",
            "options": ["a ball", "a cat"], "answer": "a ball", **over}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _captions(folder: Path) -> Path:
    p = folder / "caps.jsonl"
    p.write_text('{"video_id": "v", "caption": "A red ball rolls."}\n')
    return p


def test_judge_names_file_row_column_and_the_column_read_as_extra(tmp_path, capsys):
    good = _item("q1")
    bad = {k: v for k, v in _item("q2").items() if k != "options"} | {"choices": ["a ball", "a cat"]}
    items = _jsonl(tmp_path / "items.jsonl", [good, bad])
    out = tmp_path / "v.parquet"
    rc = cli_main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(_captions(tmp_path)),
                   "--judge", "local", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == USAGE, err
    assert "internal error" not in err
    assert f"{items}: row 2, column 'options'" in err, err
    assert "'choices'" in err and "extra" in err, err
    assert not out.exists()


def test_an_answer_that_is_no_option_is_refused_by_check_and_before_captioning(tmp_path, capsys, monkeypatch):
    from capeval.engine.datasets.synthetic_videos import make_video

    make_video(tmp_path / "v.mp4", codec="h264", seconds=1, fps=8, gop_seconds=1, seed=0)
    items = tmp_path / "items.csv"
    items.write_text('item_id,media_path,task,question,options,answer\n'
                     'q1,v.mp4,action,What moves?,"[""a ball"", ""a cat""]",a ball\n'
                     'q2,v.mp4,action,What colour?,"[""red"", ""blue""]",green\n')
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('name = "answers"\nprompts = ["brief"]\nframes = ["uniform:2"]\n'
                     '[[datasets]]\nname = "d"\nkind = "items"\npath = "items.csv"\n'
                     '[[captioners]]\nname = "local"\n'
                     '[[protocols]]\nname = "capquiz"\n[[judges]]\nname = "local"\n')
    assert cli_main(["sweep", str(sweep), "--check"]) == USAGE
    err = capsys.readouterr().err
    assert f"{sweep}, line 7: datasets[0].path:" in err, err
    assert f"{items}: row 3, column 'answer'" in err and "'green'" in err, err
    monkeypatch.chdir(tmp_path)
    assert cli_main(["sweep", str(sweep), "--no-progress"]) == USAGE
    assert "row 3, column 'answer'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # refused before anything was captioned
