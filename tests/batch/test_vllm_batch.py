"""`vllm-batch`: a small CapQuiz sweep's judge requests answered end to end by vLLM's offline batch runner
(`python -m vllm.entrypoints.openai.run_batch`) with SmolLM2-135M-Instruct on CPU, from the same batch file format
the OpenAI Batch API gets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _batch_data import CAPQUIZ, file_sweep

from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

pytest.importorskip("gguf")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # one engine start of the batch runner (~1-3 min on 2 cores)
smollm2 = pytest.importorskip("capeval.adapters.smollm2")
_CACHE = Path(os.environ.get("CAPEVAL_MODEL_CACHE", Path(__file__).resolve().parents[2] / ".capeval" / "models"))


def test_run_batch_module_takes_the_batch_files():
    import vllm.entrypoints.openai.run_batch as module  # noqa: F401 - the module the backend runs exists
    from vllm.entrypoints.launchers.run_batch import BatchRequestInput

    from capeval.adapters.batch_files import batch_line

    line = batch_line("k1", b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}', None)
    parsed = BatchRequestInput.model_validate_json(line.line)  # vLLM's own parser of an input line
    assert parsed.custom_id == "k1" and parsed.url == "/v1/chat/completions" and parsed.body.max_tokens == 4


def test_smollm2_answers_a_small_sweep_through_run_batch(tmp_path, ray_local):
    try:
        smollm2.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    model = smollm2.build_smollm2(_CACHE / "smollm2-135m-instruct")
    judge = {"name": "vllm-batch", "params": {"model": str(model), "engine_args": {
        "max_model_len": 2048, "enforce_eager": True, "seed": 0,
        "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True}}}}
    sweep = load_sweep(file_sweep(tmp_path, "capquiz", judge))
    result = run_sweep(sweep, tmp_path / "out", progress=False, log=lambda m: None)
    assert result.exit_code == 0 and result.judge_stats["sent"] == len(CAPQUIZ)
    import polars as pl

    verdicts = pl.concat([pl.read_parquet(p) for p in (tmp_path / "out" / "verdicts").rglob("*.parquet")])
    assert verdicts.height == len(CAPQUIZ) and verdicts["error"].null_count() == len(CAPQUIZ)
    assert set(verdicts["judge"]) == {"smollm2-135m-instruct"}
    assert set(verdicts["raw_output"]) <= set("ABCDE")  # structured choice, as vLLM serve would answer
    assert (verdicts["prompt_tokens"] > 50).all() and (verdicts["completion_tokens"] >= 1).all()
    runs = tmp_path / "out" / "judge_cache" / "batches" / "vllm"
    (inp,) = runs.glob("*.in.jsonl")
    lines = [json.loads(x) for x in inp.read_text().splitlines()]
    assert sorted(x["custom_id"] for x in lines) == sorted(verdicts["request_key"])
    assert {x["body"]["model"] for x in lines} == {"smollm2-135m-instruct"}
    (out,) = runs.glob("*.out.jsonl")
    assert len(out.read_text().splitlines()) == len(CAPQUIZ)
    again = run_sweep(sweep, tmp_path / "out", progress=False, log=lambda m: None)
    assert again.cells_run == 0  # everything is in the judgment cache: no engine is started again
