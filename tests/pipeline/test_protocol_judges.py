"""`[[protocols]] judges = [...]` pairs each protocol with its own judges (a multimodal judge for VC-Inspector, a
cheap text judge for CapQuiz) instead of crossing every protocol with every judge; names are judge labels or
backend names, checked by --check with file, line and field (the key used to be refused)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.cli import main as cli_main
from capeval.engine.exitcodes import USAGE
from capeval.engine.sweep.config import SweepFileError, load_sweep
from capeval.engine.sweep.grid import expand

HEAD = 'name = "pairs"\n[[datasets]]\nname = "d"\nkind = "synthetic"\nn_videos = 2\nduration_s = 1.0\n'


def _captions(folder: Path) -> Path:
    p = folder / "caps.jsonl"
    p.write_text("".join(json.dumps({"video_id": f"d-00{k}", "caption": "A red ball and a blue cube."}) + "\n"
                         for k in range(2)))
    return p


def _line(path: Path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _sweep(folder: Path, protocols: str, judges: str) -> Path:
    p = folder / "sweep.toml"
    p.write_text(HEAD + f'[[captions]]\npath = "{_captions(folder)}"\n' + protocols + judges)
    return p


JUDGES = ('[[judges]]\nname = "local"\nlabel = "cheap"\n'
          '[[judges]]\nname = "local"\nlabel = "big"\nseeds = [1]\n')


def test_each_protocol_is_judged_by_the_judges_it_names(tmp_path, ray_local, capsys):
    path = _sweep(tmp_path, '[[protocols]]\nname = "capquiz"\njudges = ["cheap"]\n'
                            '[[protocols]]\nname = "capquiz"\nlabel = "shuffled"\nparams = { shuffle = true }\n'
                            'judges = ["big"]\n', JUDGES)
    config = load_sweep(path)
    assert [(c.protocol.display, c.judge.display) for c in expand(config)] == [("capquiz", "cheap"),
                                                                              ("shuffled", "big")]
    out = tmp_path / "out"
    code = cli_main(["sweep", str(path), "--out", str(out), "--no-progress"])
    assert code in (0, 3), capsys.readouterr().err[-2000:]
    results = pl.read_parquet(out / "results.parquet")
    assert set(zip(results["protocol"], results["judge"])) == {("capquiz", "cheap"), ("shuffled", "big")}


def test_a_judge_name_matches_every_judge_of_that_backend(tmp_path):
    path = _sweep(tmp_path, '[[protocols]]\nname = "capquiz"\njudges = ["local"]\n', JUDGES)
    assert [c.judge.display for c in expand(load_sweep(path))] == ["cheap", "big"]


def test_check_names_file_line_and_field_of_each_pairing_mistake(tmp_path, capsys):
    path = _sweep(tmp_path, '[[protocols]]\nname = "capquiz"\njudges = ["cheap", "gpt"]\n'
                            '[[protocols]]\nname = "capquiz"\nlabel = "two"\njudges = []\n'
                            '[[protocols]]\nname = "capquiz"\nlabel = "three"\njudges = "cheap"\n', JUDGES)
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    problems = info.value.problems
    lines = {k: _line(path, needle) for k, needle in (("unknown", 'judges = ["cheap", "gpt"]'),
                                                      ("empty", "judges = []"), ("text", 'judges = "cheap"'))}
    expected = [(f"line {lines['unknown']}: protocols[0].judges:",
                 "no judge named or labelled 'gpt' (have 'cheap', 'big')"),
                (f"line {lines['empty']}: protocols[1].judges:", "must name at least one judge"),
                (f"line {lines['text']}: protocols[2].judges:", "expected list")]
    for where, why in expected:
        assert any(where in p and why in p for p in problems), (where, problems)
    assert len(problems) == len(expected), problems
    assert cli_main(["sweep", str(path), "--check"]) == USAGE
    assert "protocols[0].judges" in capsys.readouterr().err


def test_a_judge_no_protocol_is_judged_by_is_refused(tmp_path):
    path = _sweep(tmp_path, '[[protocols]]\nname = "capquiz"\njudges = ["cheap"]\n', JUDGES)
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    (problem,) = info.value.problems
    header = _line(path, 'label = "big"') - 2  # its [[judges]] line
    assert f"line {header}: judges[1]:" in problem, problem
    assert "no protocol is judged by judge 'big'" in problem, problem
