"""A real chat model in VC-Inspector's augmentation chain: SmolLM2-135M-Instruct (adapters/smollm2.py, greedy, on
CPU) makes the alternatives and rewrites the captions in official mode, the extraction being scripted (the 135M model
does not write the list literal the official parser needs: that failure is checked too). What a model this small
writes is poor, but it goes through the real path: prompts rendered from the official pack, replies cached and
recorded, labels by the rule, and a rerun asks the model nothing."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import polars as pl
import pytest

from _vcinspector_inputs import OFFICIAL_PACK, SOURCES, ScriptedJudge, run_construct, write_source
from capeval.engine.protocols.vcinspector.augment import quality_label

pytest.importorskip("gguf")
pytestmark = pytest.mark.slow  # loads a 135M model with transformers and generates ~20 short replies (~1 min)
smollm2 = pytest.importorskip("capeval.adapters.smollm2")

_CACHE = Path(os.environ.get("CAPEVAL_MODEL_CACHE", Path(__file__).resolve().parents[2] / ".capeval" / "models"))
MAX_NEW_TOKENS = 24  # the official 2,048 would let a 135M model ramble for minutes; the replies used here are short


class SmolLM2Judge:
    """capeval.adapters.base.Judge over transformers' generate: the chat template, greedy decoding."""

    name = "smollm2-135m-instruct"

    def __init__(self, folder: Path):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(str(folder))
        self.model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.bfloat16)
        config = (folder / "config.json").read_bytes()
        self.revision = f"smollm2:{hashlib.sha256(config).hexdigest()[:12]}:greedy{MAX_NEW_TOKENS}"
        self.calls = 0
        self.replies: list[tuple[str, str]] = []

    def judge(self, requests):
        from capeval.adapters.base import JudgeResponse

        out = []
        for r in requests:
            self.calls += 1
            messages = ([{"role": "system", "content": r.system}] if r.system else []) + \
                [{"role": "user", "content": r.user}]
            prompt = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            ids = self.tok(prompt, return_tensors="pt").input_ids
            with self.torch.no_grad():
                gen = self.model.generate(ids, max_new_tokens=min(r.max_tokens, MAX_NEW_TOKENS), do_sample=False)
            text = self.tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)
            self.replies.append((r.task.split("/")[-1], text))
            out.append(JudgeResponse(r.key, text, prompt_tokens=ids.shape[1],
                                     completion_tokens=gen.shape[1] - ids.shape[1]))
        return out

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def smol() -> SmolLM2Judge:
    try:
        smollm2.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return SmolLM2Judge(smollm2.build_smollm2(_CACHE / "smollm2-135m-instruct"))


@pytest.mark.skipif(not OFFICIAL_PACK.is_file(), reason="the official VC-Inspector pack is not beside the project")
def test_smollm2_makes_alternatives_and_rewrites_in_official_mode(tmp_path, smol):
    source = write_source(tmp_path / "source.jsonl", sources=SOURCES[:1])
    roles = {"*": ["scripted"], "new_object": ["smol"], "new_action": ["smol"], "substitute": ["smol"]}
    judges = {"scripted": ScriptedJudge("official"), "smol": smol}
    run_construct(tmp_path / "out", "official", None, source=source, samples=1, variants="obj_act", roles=roles,
                  judges=judges)
    steps = {s for s, _ in smol.replies}
    assert {"new_object", "substitute"} <= steps and all(text.strip() for _, text in smol.replies)
    labels = pl.read_parquet(tmp_path / "out" / "labels.parquet")
    record = pl.read_parquet(tmp_path / "out" / "record.parquet")
    made = record.filter(pl.col("step").is_in(["new_object", "new_action"]) & pl.col("kept"))
    assert made.height > 0  # official mode takes the model's reply as written: every non-empty reply is kept
    for row in labels.iter_rows(named=True):
        assert row["label"] == quality_label(row["n_replaced"], row["n_objects"] + row["n_actions"])
    for r in (json.loads(line) for line in (tmp_path / "out" / "finetune.jsonl").read_text().splitlines()):
        assert r["messages"][1]["content"].split("\n", 1)[0] in {"1", "2", "3", "4", "5"}

    calls = smol.calls
    run_construct(tmp_path / "out", "official", None, source=source, samples=1, variants="obj_act", roles=roles,
                  judges={"scripted": ScriptedJudge("official"), "smol": smol})
    assert smol.calls == calls  # the rerun is answered from the judgment cache


def test_smollm2_extraction_is_refused_with_its_reason_not_guessed(tmp_path, smol):
    """Strict mode asks for JSON; a reply that is not the requested object is re-asked (twice, warmer) and, if still
    unusable, recorded as failed with the parser's reason, and the caption yields no pseudo captions."""
    source = write_source(tmp_path / "source.jsonl", sources=SOURCES[:1])
    before = len(smol.replies)
    run_construct(tmp_path / "out", "strict", None, source=source, samples=1, judges={"scripted": smol})
    record = pl.read_parquet(tmp_path / "out" / "record.parquet")
    extraction = record.filter(pl.col("step").is_in(["extract_objects", "extract_actions"]))
    assert extraction.height == 2
    for row in extraction.iter_rows(named=True):
        if row["kept"]:  # the model produced the JSON asked for: its elements are a list of texts
            assert isinstance(json.loads(row["output"])["elements"], list)
        else:
            assert row["reason"].startswith("generation failed:") and row["output"] is not None
    assert len(smol.replies) > before
    if not extraction["kept"].all():
        plan = record.filter(pl.col("step") == "plan")
        assert plan.height == 1 and "extraction failed" in plan["reason"][0]
