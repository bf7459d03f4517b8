"""VidCapBench official mode reads its input files as the official eval.py does (issue 26 item 13), through the
command line a user runs -- `capeval judge --dataset vidcapbench --mode official` on a QA file in the released layout
and a caption file, the replay judge answering from an oracle case's recorded replies -> run_judging -> metrics:

* every caption line is judged against the QA lines of its video_dir (eval.py:46-93), so a repeated caption line is
  judged (and counted) twice, and the token mean runs over all lines (139-151);
* an empty caption is formatted into the prompts like any other;
* a video with several QA lines has the pairs of all of them judged, question ids or not;
* a QA pair without `sub_category` is refused with exit 2 and a reason (the script stops with KeyError on it).

The expected figures follow from the official formulas (shared/protocols/README.md, eval.py:186-209) applied to the
oracle's own per-pair letters; the same formulas give back the oracle's printed figures for the case as it is."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.cli import main

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "protocols"
ORACLE = Path(os.environ.get("CAPEVAL_ORACLE_DIR", SHARED)) / "vidcapbench_oracle.jsonl"
PACK = Path(os.environ.get("CAPEVAL_PACK_DIR", SHARED)) / "vidcapbench.toml"


def _base_case() -> dict:
    """An oracle case the official script scored with every pair counted."""
    if not ORACLE.is_file() or not PACK.is_file():
        pytest.skip("VidCapBench oracle or pack not present")
    cases = [json.loads(line) for line in ORACLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    case = next((c for c in cases if c["official"]["status"] == "ok"
                 and all(q["official_correctness"] is not None for q in c["qa"])), None)
    if case is None:
        pytest.skip("needs an oracle case with every pair scored")
    return case


def _official_overall(letters: list[str], tokens: list[int]) -> dict:
    """eval.py's overall figures from the counted pairs' letters and every caption line's token count."""
    n = {x: letters.count(x) for x in "ABCD"}
    total = sum(n.values())
    acc = 100 * n["A"] / total
    return {"Acc": acc, "Pre": 100 * (n["A"] + n["B"]) / (n["A"] + n["B"] + n["D"]),
            "Cov": 100 * (n["A"] + n["B"] + n["D"]) / total, "Con": 100 * acc / (sum(tokens) / len(tokens))}


def _write_inputs(tmp_path: Path, case: dict, caption_lines: list[dict], qa_lines: list[dict]) -> list[str]:
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(line) + "\n" for line in qa_lines))
    (tmp_path / "captions.jsonl").write_text("".join(
        json.dumps({"video_id": c["video_dir"], "caption": c["caption"], "n_tokens": c["t5_tokens"]}) + "\n"
        for c in caption_lines))
    replies = []
    for qa in case["qa"]:
        item = f"{qa['video_dir']}#{qa['question_id']}"
        replies += [{"item_id": item, "step": "answer", "text": qa["pred"]},
                    {"item_id": item, "step": "score", "text": qa["judge_reply"]}]
    (tmp_path / "replies.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies))
    return ["judge", "--protocol", "vidcapbench", "--dataset", "vidcapbench", "--items", str(tmp_path / "qa.jsonl"),
            "--captions", str(tmp_path / "captions.jsonl"), "--judge", "replay",
            "--judge-option", f"replies={tmp_path / 'replies.jsonl'}", "--mode", "official",
            "--param", "con_tokens=n_tokens", "--prompts", str(PACK), "--cache", str(tmp_path / "cache"),
            "--out", str(tmp_path / "v.parquet"), "--metrics", str(tmp_path / "m.csv"), "--resamples", "0",
            "--no-progress"]


def _qa_lines(case: dict) -> list[dict]:
    by_video: dict[str, list] = {}
    for qa in case["qa"]:
        by_video.setdefault(qa["video_dir"], []).append(
            {k: qa[k] for k in ("question_id", "question", "answer", "sub_category")})
    return [{"video_dir": v, "QA_pairs": p} for v, p in by_video.items()]


def _overall(tmp_path: Path) -> dict:
    metrics = pl.read_csv(tmp_path / "m.csv")
    rows = metrics.filter((pl.col("dimension") == "all") & (pl.col("consistency") == "all"))
    return {r["metric"]: r for r in rows.iter_rows(named=True)}


def _assert_figures(tmp_path: Path, expected: dict, n_pairs: int) -> None:
    got = _overall(tmp_path)
    for metric, value in expected.items():
        assert got[metric]["value"] == pytest.approx(value, abs=1e-6), (metric, got[metric])
        assert got[metric]["n"] == n_pairs, (metric, got[metric])


def test_the_formulas_give_back_the_oracle_figures():
    case = _base_case()
    expected = _official_overall([q["official_correctness"] for q in case["qa"]],
                                 [c["t5_tokens"] for c in case["captions"]])
    official = case["official"]["overall"]
    for metric, key in (("Acc", "accuracy"), ("Pre", "precision"), ("Cov", "coverage"), ("Con", "conciseness")):
        assert expected[metric] == pytest.approx(official[key], abs=1e-9)


def test_a_repeated_caption_line_is_judged_twice(tmp_path, capsys):
    case = _base_case()
    repeated = case["captions"][0]
    lines = [*case["captions"], dict(repeated)]
    code = main(_write_inputs(tmp_path, case, lines, _qa_lines(case)))
    assert code == 0, capsys.readouterr().err
    letters = [q["official_correctness"] for q in case["qa"]]
    letters += [q["official_correctness"] for q in case["qa"] if q["video_dir"] == repeated["video_dir"]]
    _assert_figures(tmp_path, _official_overall(letters, [c["t5_tokens"] for c in lines]), len(letters))
    verdicts = pl.read_parquet(tmp_path / "v.parquet").filter(pl.col("step") == "score")
    twice = verdicts.filter(pl.col("video_id") == repeated["video_dir"])
    assert twice["request_key"].n_unique() == twice.height == 2 * twice["item_id"].n_unique()  # two calls each


def test_an_empty_caption_is_judged(tmp_path, capsys):
    case = copy.deepcopy(_base_case())
    empty = case["captions"][1]
    empty["caption"], empty["t5_tokens"] = "", 1  # flan-t5-base: only </s>
    code = main(_write_inputs(tmp_path, case, case["captions"], _qa_lines(case)))
    assert code == 0, capsys.readouterr().err
    letters = [q["official_correctness"] for q in case["qa"]]
    _assert_figures(tmp_path, _official_overall(letters, [c["t5_tokens"] for c in case["captions"]]), len(letters))
    verdicts = pl.read_parquet(tmp_path / "v.parquet")
    judged = verdicts.filter((pl.col("video_id") == empty["video_dir"]) & (pl.col("step") == "score"))
    assert judged.height == sum(q["video_dir"] == empty["video_dir"] for q in case["qa"]) > 0
    assert judged["verdict"].min() >= 0


def test_several_qa_lines_of_one_video_without_ids_are_all_judged(tmp_path, capsys):
    case = copy.deepcopy(_base_case())
    lines = _qa_lines(case)
    first = next(line for line in lines if len(line["QA_pairs"]) > 1)
    for pair in (p for line in lines for p in line["QA_pairs"]):
        del pair["question_id"]
    half = len(first["QA_pairs"]) // 2
    lines.append({"video_dir": first["video_dir"], "QA_pairs": first["QA_pairs"][half:]})
    first["QA_pairs"] = first["QA_pairs"][:half]
    # pairs without ids are numbered by their position among their video's pairs, across its lines
    position: dict[str, int] = {}
    for qa in case["qa"]:
        k = position.get(qa["video_dir"], 0)
        position[qa["video_dir"]] = k + 1
        qa["question_id"] = str(k)
    code = main(_write_inputs(tmp_path, case, case["captions"], lines))
    assert code == 0, capsys.readouterr().err
    official = case["official"]["overall"]
    _assert_figures(tmp_path, {"Acc": official["accuracy"], "Pre": official["precision"],
                               "Cov": official["coverage"], "Con": official["conciseness"]}, len(case["qa"]))


def test_a_pair_without_sub_category_is_refused_with_exit_2(tmp_path, capsys):
    case = _base_case()
    lines = _qa_lines(case)
    del lines[-1]["QA_pairs"][0]["sub_category"]
    code = main(_write_inputs(tmp_path, case, case["captions"], lines))
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"qa.jsonl:{len(lines)}" in err and "sub_category" in err and "KeyError" in err, err
    assert "internal error" not in err
