"""`sweep --check` catches what the run would fail on, every problem at once with the sweep file's line and field:
dataset tables read by the run's own readers (their errors name the table's file and line), captioner/judge param
values (the backend config's own checks), entries after a dropped one named at their own index and line, and a
sweep name that would write outside runs/."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from capeval.engine.cli import main as cli_main
from capeval.engine.exitcodes import OK, USAGE
from capeval.engine.sweep.config import SweepFileError, load_sweep

ITEM = '{"item_id": "%s", "video_id": "v", "task": "t", "annotation": "%s", "answer": "x"}\n'


def _write(folder: Path, text: str, name: str = "sweep.toml") -> Path:
    p = folder / name
    p.write_text(textwrap.dedent(text))
    return p


def _line_of(path: Path, needle: str, nth: int = 1) -> int:
    hits = [n for n, line in enumerate(path.read_text().splitlines(), start=1) if needle in line]
    return hits[nth - 1]


def _problems(path: Path) -> list[str]:
    with pytest.raises(SweepFileError) as info:
        load_sweep(path)
    return info.value.problems


def _captions(folder: Path) -> Path:
    p = folder / "caps.jsonl"
    p.write_text('{"video_id": "v", "caption": "A red ball."}\n')
    return p


def test_check_reads_dataset_tables_with_the_runs_readers(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "broken.jsonl").write_text(ITEM % ("a", "q?") + '{"item_id": broken\n')
    (tmp_path / "latin.csv").write_bytes(b"item_id,video_id,task,annotation,answer\na,v,t,caf\xe9?,x\n")
    (tmp_path / "dups.jsonl").write_text(ITEM % ("a", "q?") + ITEM % ("a", "another question?"))
    datasets = "".join(f'\n[[datasets]]\nname = "{n}"\nkind = "items"\npath = "{f}"\n'
                       for n, f in (("e", "empty.jsonl"), ("b", "broken.jsonl"), ("l", "latin.csv"),
                                    ("d", "dups.jsonl")))
    path = _write(tmp_path, f'name = "tables"\n{datasets}\n[[captions]]\npath = "{_captions(tmp_path)}"\n\n'
                            '[[protocols]]\nname = "capquiz"\n\n[[judges]]\nname = "local"\n')
    problems = _problems(path)
    assert len(problems) == 4, problems
    expected = [("datasets[0].path", "empty.jsonl", 1, "no items"),
                ("datasets[1].path", "broken.jsonl:2", 2, "malformed JSON"),
                ("datasets[2].path", "latin.csv:2", 3, "not UTF-8"),
                ("datasets[3].path", "dups.jsonl", 4, "duplicate item ids")]
    for problem, (field, table, nth, why) in zip(problems, expected):
        assert f"{path}, line {_line_of(path, 'path = ', nth)}: {field}:" in problem, problem
        assert table in problem and why in problem, problem
    assert cli_main(["sweep", str(path), "--check"]) == USAGE
    assert "4 problems" in capsys.readouterr().err


def test_check_reports_judge_param_values_with_lines(tmp_path):
    bad = [("timeout_s", '"fast"', "expected float"), ("max_attempts", "-3", "max_attempts"),
           ("base_url", '"ftp://x"', "http"), ("structured", '"nonsense"', "structured")]
    judges = "".join(f'\n[[judges]]\nname = "openai"\nlabel = "j{i}"\nparams = {{ base_url = "http://127.0.0.1:9", '
                     f'{k} = {v} }}\n' if k != "base_url" else
                     f'\n[[judges]]\nname = "openai"\nlabel = "j{i}"\nparams = {{ {k} = {v} }}\n'
                     for i, (k, v, _) in enumerate(bad))
    path = _write(tmp_path, f'name = "judges"\n[[datasets]]\nname = "d"\nkind = "synthetic"\nn_videos = 1\n'
                            f'[[captions]]\npath = "{_captions(tmp_path)}"\n[[protocols]]\nname = "capquiz"\n{judges}')
    problems = _problems(path)
    assert len(problems) == 4, problems
    for i, (problem, (key, _, why)) in enumerate(zip(problems, bad)):
        assert f"line {_line_of(path, 'params = ', i + 1)}: judges[{i}].params.{key}:" in problem, problem
        assert why in problem, problem


def test_an_entry_after_a_dropped_one_is_named_at_its_own_index_and_line(tmp_path):
    path = _write(tmp_path, f'''\
        name = "index"
        [[datasets]]
        name = "d"
        kind = "synthetic"
        n_videos = 1
        [[captions]]
        path = "{_captions(tmp_path)}"
        [[protocols]]
        name = "capquiz"
        [[judges]]
        name = 5
        params = {{}}
        [[judges]]
        name = "local"
        label = "second"
        params = {{ bogus = 1 }}
        ''')
    problems = _problems(path)
    assert len(problems) == 2, problems
    assert f"line {_line_of(path, 'name = 5')}: judges[0].name: expected str" in problems[0], problems[0]
    assert f"line {_line_of(path, 'params = ', 2)}: judges[1].params: judge 'local' does not accept 'bogus'" \
        in problems[1], problems[1]


@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", "a/b", "..", "a\\\\b"])
def test_a_sweep_name_that_would_write_outside_runs_is_refused(tmp_path, name, capsys, monkeypatch):
    path = _write(tmp_path, f'name = "{name}"\n[[datasets]]\nname = "d"\nkind = "synthetic"\nn_videos = 1\n'
                            f'[[captions]]\npath = "{_captions(tmp_path)}"\n'
                            '[[protocols]]\nname = "capquiz"\n[[judges]]\nname = "local"\n')
    problems = _problems(path)
    assert len(problems) == 1 and f"{path}, line 1: name: must be a plain folder name" in problems[0], problems
    monkeypatch.chdir(tmp_path)
    assert cli_main(["sweep", str(path), "--no-progress"]) == USAGE
    assert not (tmp_path / "escape").exists() and not (tmp_path / "runs").exists()
    good = _write(tmp_path, path.read_text().replace(f'name = "{name}"', 'name = "fine"'), "good.toml")
    assert cli_main(["sweep", str(good), "--check"]) == OK


def test_check_reports_protocol_choices_the_run_would_refuse(tmp_path):
    """CapQuiz `average` and LVCap-Eval `event_scoring` are checked by --check with the functions the run uses (they
    used to pass --check and stop the run later)."""
    path = _write(tmp_path, f'name = "choices"\n[[datasets]]\nname = "d"\nkind = "synthetic"\nn_videos = 1\n'
                            f'[[captions]]\npath = "{_captions(tmp_path)}"\n'
                            '[[protocols]]\nname = "capquiz"\nparams = { average = "median" }\n'
                            '[[protocols]]\nname = "lvcap"\nparams = { mode = "official", event_scoring = "vibes" }\n'
                            '[[judges]]\nname = "local"\n')
    problems = _problems(path)
    assert any("protocols[0].params.average" in p and "per_video" in p for p in problems), problems
    assert any("protocols[1].params.event_scoring" in p and "autodq" in p for p in problems), problems
