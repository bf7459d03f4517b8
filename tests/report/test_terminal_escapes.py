"""Dataset categories, options, task names and captioner labels are untrusted text: none of their escape sequences
(ESC, CSI, OSC, BEL, C1 controls) may reach the terminal raw. Every command that prints them -- the sweep's progress
lines, report, compare, judge, score, show, plan, capability score, construct -- is run on hostile inputs (real local
Ray, the local judge, real files) and its whole stdout and stderr, as the file descriptors received them, are
searched for the raw bytes; the hostile text is still there, escaped."""

from __future__ import annotations

import json
import shutil

import pytest

from capeval.engine.cli import main

from _terminal_escapes import HOSTILE, assert_escaped


def _toml(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string (\u escapes)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-terminal")
    items = root / "items.jsonl"
    with items.open("w") as f:
        for v in range(3):
            for q in range(2):
                f.write(json.dumps({"item_id": f"v{v}/q{q}", "video_id": f"v{v}", "task": f"count{HOSTILE}",
                                    "annotation": f"How many shapes? {HOSTILE}",
                                    "options": [f"1{HOSTILE}", "2", "3", "4", "5"], "answer": "2",
                                    "category": f"counting{HOSTILE}", "benchmark": "capquiz"}) + "\n")
    captions = {}
    for name, text in (("mine", "Two shapes move."), ("other", "One shape moves.")):
        captions[name] = root / f"{name}.jsonl"
        captions[name].write_text("".join(json.dumps({"video_id": f"v{v}", "caption": text}) + "\n"
                                          for v in range(3)))
    sweep = root / "sweep.toml"
    sweep.write_text(f'name = "hostile"\n[[datasets]]\nname = "quiz"\nkind = "items"\npath = "{items}"\n'
                     f'[[captions]]\npath = "{captions["mine"]}"\ncaptioner = {_toml("mine" + HOSTILE)}\n'
                     f'[[captions]]\npath = "{captions["other"]}"\ncaptioner = "other"\n'
                     '[[protocols]]\nname = "capquiz"\n[[judges]]\nname = "local"\n[options]\nn_resamples = 20\n')
    return root, items, captions, sweep


@pytest.fixture(scope="module")
def swept(hostile, ray_local):
    root, _, _, sweep = hostile
    out = root / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAPEVAL_PROGRESS_EVERY_S", "0")  # plain progress lines, every update
        import sys

        from _pytest.capture import FDCapture

        captures = [FDCapture(1), FDCapture(2)]
        for c in captures:
            c.start()
        try:
            code = main(["sweep", str(sweep), "--out", str(out)])
            sys.stdout.flush(), sys.stderr.flush()
        finally:
            texts = [c.snap() for c in captures]
            for c in captures:
                c.done()
    assert code == 0, texts
    return out, texts


def test_sweep_progress_lines_are_escaped(swept):
    _, (out, err) = swept
    assert "cell 1/2 complete" in out + err
    assert_escaped(out + err, "sweep")


@pytest.mark.parametrize("command", [["report"], ["compare"], ["show", "--limit", "3"], ["show", "--json", "--limit", "2"]])
def test_run_folder_commands_print_no_raw_escapes(swept, command, capfd):
    out, _ = swept
    assert main([command[0], str(out), *command[1:]]) == 0
    text = assert_escaped(capfd.readouterr(), " ".join(command), expect_visible="--json" not in command)
    if "--json" in command:  # escaped the JSON way: it parses back to the hostile text itself
        shown = json.loads(text)["requests"]
        assert shown and any(r["cell"]["captioner"] == "mine" + HOSTILE for r in shown)


def test_judge_and_score_print_no_raw_escapes(hostile, tmp_path, capfd, ray_local):
    _, items, captions, _ = hostile
    verdicts = tmp_path / "v.parquet"
    assert main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions["mine"]),
                 "--judge", "local", "--out", str(verdicts), "--by", "category", "--resamples", "20"]) == 0
    assert_escaped(capfd.readouterr(), "judge")
    assert main(["score", "--protocol", "capquiz", "--verdicts", str(verdicts), "--items", str(items),
                 "--captions", str(captions["mine"]), "--out", str(tmp_path / "m.csv"), "--by", "category",
                 "--resamples", "20"]) == 0
    assert_escaped(capfd.readouterr(), "score")


def test_plan_prints_no_raw_escapes(hostile, capfd):
    _, _, _, sweep = hostile
    assert main(["plan", str(sweep)]) == 0
    assert_escaped(capfd.readouterr(), "plan", expect_visible=False)  # its tables name judges and protocols


def test_capability_score_prints_no_raw_escapes(shared_data, tmp_path, capfd):
    """A judgments file for an id the annotations do not have, named with escapes: counted and skipped."""
    release = shared_data / "capability"
    annotations, judgments = tmp_path / "annotations", tmp_path / "judgments" / f"model{HOSTILE}"
    annotations.mkdir()
    judgments.mkdir(parents=True)
    shutil.copy(release / "annotations" / "object_color.jsonl", annotations)
    rows = (release / "judgments" / "gpt-4o-0806" / "object_color.jsonl").read_text().splitlines()[:40]
    (judgments / "object_color.jsonl").write_text("\n".join(rows) + "\n")
    assert main(["capability", "score", "--annotations", str(annotations), "--judgments", str(judgments),
                 "--out", str(tmp_path / "cap.csv"), "--resamples", "20"]) == 0
    assert_escaped(capfd.readouterr(), "capability score")
