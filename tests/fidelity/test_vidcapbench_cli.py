"""VidCapBench from the command line, as a user re-scores a recorded judge run: `capeval judge --dataset
vidcapbench` on a QA file in the released layout, a caption file whose `n_tokens` are the given flan-t5-base
counts (declared with --param con_tokens=n_tokens), the replay judge, official mode with the benchmark's pack -> the official script's figures."""

from __future__ import annotations

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


def _first_ok_case() -> dict:
    if not ORACLE.is_file() or not PACK.is_file():
        pytest.skip("VidCapBench oracle or pack not present")
    cases = [json.loads(line) for line in ORACLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    return next(c for c in cases if c["official"]["status"] == "ok")


def test_capeval_judge_official_mode_reproduces_an_oracle_case(tmp_path, capsys):
    case = _first_ok_case()
    by_video: dict[str, list] = {}
    for qa in case["qa"]:
        by_video.setdefault(qa["video_dir"], []).append({k: qa[k] for k in ("question_id", "question", "answer",
                                                                            "sub_category")})
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps({"video_dir": v, "QA_pairs": p}) + "\n"
                                               for v, p in by_video.items()))
    (tmp_path / "captions.jsonl").write_text("".join(
        json.dumps({"video_id": c["video_dir"], "caption": c["caption"], "n_tokens": c["t5_tokens"]}) + "\n"
        for c in case["captions"]))
    replies = []
    for qa in case["qa"]:
        item = f"{qa['video_dir']}#{qa['question_id']}"
        replies += [{"item_id": item, "step": "answer", "text": qa["pred"]},
                    {"item_id": item, "step": "score", "text": qa["judge_reply"]}]
    (tmp_path / "replies.jsonl").write_text("".join(json.dumps(r) + "\n" for r in replies))
    code = main(["judge", "--protocol", "vidcapbench", "--dataset", "vidcapbench", "--items", str(tmp_path / "qa.jsonl"),
                 "--captions", str(tmp_path / "captions.jsonl"), "--judge", "replay",
                 "--judge-option", f"replies={tmp_path / 'replies.jsonl'}", "--mode", "official", "--param", "con_tokens=n_tokens",
                 "--prompts", str(PACK), "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "v.parquet"),
                 "--metrics", str(tmp_path / "m.csv"), "--resamples", "0", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    metrics = pl.read_csv(tmp_path / "m.csv")
    assert set(metrics["mode"]) == {"official"}
    for section in ("overall", "aesthetics", "content", "motion", "physics"):
        for key, metric in (("accuracy", "Acc"), ("precision", "Pre"), ("coverage", "Cov"), ("conciseness", "Con")):
            row = metrics.filter((pl.col("dimension") == ("all" if section == "overall" else section))
                                 & (pl.col("metric") == metric) & (pl.col("consistency") == "all"))
            assert row.height == 1
            assert row["value"][0] == pytest.approx(case["official"][section][key], abs=1e-6), (section, metric)
    con = metrics.filter(pl.col("metric") == "Con").row(0, named=True)
    assert con["tokens_source"] == "n_tokens (given with the captions)"
    assert con["avg_tokens"] == pytest.approx(case["official"]["avg_token_num"])
