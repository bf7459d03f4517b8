"""The CAPability release's judgments folders are read alike by every command that takes verdicts: `capeval score
--verdicts` reads one model's `judgments/<model>/` folder as `judge validate --reference` does (the same numbers as
`capeval capability score`), and the `judgments/` root that holds the model folders is answered with those folders
(exit 2), by `score`, `capability score` and `judge validate` alike. Real release files, real CLI processes."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

MODELS = ("gemini-1.5-pro", "gpt-4o-0806", "internvl2.5_78b", "llava_ov_7b_hf", "qwen2.5vl_7b")
TASKS = ("object_color", "scene", "camera_angle", "dynamic_object_number")
N_ITEMS = 40


def _capeval(*args, cwd):
    return subprocess.run([sys.executable, "-m", "capeval.engine.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def release(shared_data, tmp_path_factory):
    root = shared_data / "capability"
    tmp = tmp_path_factory.mktemp("release")
    (tmp / "annotations").mkdir()
    for task in TASKS:
        lines = (root / "annotations" / f"{task}.jsonl").read_text().splitlines()[:N_ITEMS]
        (tmp / "annotations" / f"{task}.jsonl").write_text("\n".join(lines) + "\n")
    return {"tmp": tmp, "annotations": tmp / "annotations", "root": root / "judgments",
            "model": root / "judgments" / "gpt-4o-0806"}


def _rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_score_reads_a_released_model_folder_as_capability_score_does(release):
    tmp = release["tmp"]
    got = _capeval("score", "--protocol", "capability", "--verdicts", release["model"], "--items",
                   release["annotations"], "--mode", "official", "--resamples", "0", "--out", tmp / "score.csv",
                   "--quiet", cwd=tmp)
    assert got.returncode == 0, got.stderr
    ref = _capeval("capability", "score", "--annotations", release["annotations"], "--judgments", release["model"],
                   "--mode", "official", "--resamples", "0", "--unknown-ids", "count", "--out", tmp / "release.csv", cwd=tmp)
    assert ref.returncode == 0, ref.stderr
    expected = {(r["dimension"], m): r[m] for r in _rows(tmp / "release.csv")
                for m in ("precision", "recall", "f1", "hit_rate")}
    ours = {(r["task"], r["metric"]): r["value"] for r in _rows(tmp / "score.csv")
            if r["metric"] in ("precision", "recall", "f1", "hit_rate")}
    assert {k for k in expected if k[0] != "avg"} <= set(ours)
    compared = 0
    for key, value in expected.items():
        if key in ours and value != "":
            assert float(ours[key]) == pytest.approx(float(value), abs=1e-9), key
            compared += 1
    assert compared >= len(TASKS) * 4


def test_score_needs_items_for_a_released_folder(release):
    got = _capeval("score", "--protocol", "capability", "--verdicts", release["model"], "--out",
                   release["tmp"] / "x.csv", cwd=release["tmp"])
    assert got.returncode == 2
    assert "released judgments/<model>/" in got.stderr and "give --items" in got.stderr


@pytest.mark.parametrize("command", ["score", "capability score", "judge validate"])
def test_the_judgments_root_is_answered_with_its_model_folders(release, command):
    tmp = release["tmp"]
    if command == "score":
        args = ["score", "--protocol", "capability", "--verdicts", release["root"], "--items", release["annotations"],
                "--out", tmp / "x.csv"]
    elif command == "capability score":
        args = ["capability", "score", "--annotations", release["annotations"], "--judgments", release["root"],
                "--out", tmp / "x.csv"]
    else:
        args = ["judge", "validate", "--protocol", "capability", "--reference", release["root"], "--items",
                release["annotations"], "--judge", "local"]
    got = _capeval(*args, cwd=tmp)
    assert got.returncode == 2, got.stderr
    assert f"model folders ({', '.join(MODELS)}): pass one of them" in got.stderr
    assert "object_category.jsonl" not in got.stderr and "no such file" not in got.stderr


def test_another_protocol_given_a_folder_says_what_it_reads_and_what_the_folder_holds(release):
    got = _capeval("score", "--protocol", "capquiz", "--verdicts", release["model"], "--out",
                   release["tmp"] / "x.csv", cwd=release["tmp"])
    assert got.returncode == 2
    assert "capeval score reads a verdict table" in got.stderr
    assert "This folder holds: OCR.jsonl, action.jsonl" in got.stderr
