"""`capeval construct capquiz` with a real chat model: SmolLM2-135M-Instruct (adapters/smollm2.py) on vLLM's CPU
engine answers the taxonomy, type classification (every candidate) and blind-solvability steps from capeval's
strict prompts; the generation is replayed. Its answers are whatever a 135M model says, so the test checks what the
pipeline does with them: every reply is one of the offered names or letters (structured choices), each lands in
the record with the request key it was cached under, and the items still load and balance."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from _capquiz_inputs import generation_replies, make_videos
from _smollm2 import smollm2_judge_options

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # one engine start (~1-2 min on 2 cores)
pytest.importorskip("capeval.adapters.smollm2")
TEN = {"Entity", "Attribute", "Action", "Event", "Setting", "Relational Reasoning", "Causal Reasoning",
       "Interpretive Reasoning", "Intent & Emotion Reasoning", "Grounding Reasoning"}


def test_smollm2_answers_three_steps(tmp_path):
    from capeval.engine.cli import main
    from capeval.engine.inputs import read_items

    videos, truths = make_videos(tmp_path / "videos", 2)
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in generation_replies(truths)))
    out = tmp_path / "quiz"
    with smollm2_judge_options("smol") as smol:
        code = main(["construct", "capquiz", "--input", str(videos), "--out", str(out), "--judge", "vllm@smol",
                     *smol, "--step-judge", "generate=replay", "--judge-option", f"replay:replies={replies}",
                     "--classify", "all", "--trials", "2", "--min-correct", "2", "--no-progress"])
    assert code == 0
    record = pq.read_table(out / "record.parquet").to_pylist()
    summary = json.loads((out / "construct.json").read_text())
    assert summary["judges"]["smol"]["name"] == "smollm2-135m-instruct"
    n_cands = sum(1 for r in record if r["step"] == "classify")
    assert n_cands == 2 * 7  # seven well-formed questions per video, every one classified by the model
    for r in record:
        if r["step"] == "classify":
            assert r["kept"] and json.loads(r["output"])["type"] in TEN and r["request_key"]
        if r["step"] == "taxonomy":
            assert r["reason"].startswith("domain ")  # a name from the list (or Others), never a failure
        if r["step"] == "blind" and r["trial"] is not None:
            reply = json.loads(r["output"])["reply"]
            assert reply in "ABCDE" and len(reply) == 1 and r["reason"].endswith(("right", "wrong"))
    assert sum(1 for r in record if r["step"] == "blind" and r["trial"] is not None) == n_cands * 2
    assert summary["steps"]["classify"]["failed"] == 0 and summary["steps"]["blind"]["failed"] == 0
    items = read_items(out / "items.jsonl", benchmark="capquiz").to_pylist()
    kept = {r["item_id"] for r in record if r["step"] in ("blind", "dedup") and r["trial"] is None and r["kept"]}
    assert {i["item_id"] for i in items} == kept
    assert all(i["category"] in TEN for i in items)
