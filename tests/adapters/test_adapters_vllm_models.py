"""Random-weight model builds: deterministic by seed, reused when the spec matches, loadable by transformers."""

from __future__ import annotations

import json

import pytest

from capeval.adapters.checkpoints import BUILD_SPEC_FILE
from capeval.testing.random_models import build_tiny_lm, count_parameters, iter_corpus_texts
from capeval.adapters.vllm_engine import model_revision


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    a = build_tiny_lm(tmp_path / "a", vocab=512, seed=0)
    b = build_tiny_lm(tmp_path / "b", vocab=512, seed=0)
    c = build_tiny_lm(tmp_path / "c", vocab=512, seed=1)
    assert model_revision(str(a)) == model_revision(str(b)) != model_revision(str(c))
    assert (a / "tokenizer.json").read_bytes() == (c / "tokenizer.json").read_bytes()  # seed changes weights only


def test_rebuild_is_skipped_when_the_spec_matches_and_redone_when_not(tmp_path):
    d = build_tiny_lm(tmp_path / "m", vocab=512)
    weights = next(d.glob("*.safetensors"))
    mtime = weights.stat().st_mtime_ns
    assert build_tiny_lm(tmp_path / "m", vocab=512) == d
    assert weights.stat().st_mtime_ns == mtime
    build_tiny_lm(tmp_path / "m", vocab=512, layers=3)
    assert json.loads((d / BUILD_SPEC_FILE).read_text())["layers"] == 3


def test_model_loads_in_transformers_with_the_expected_size(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    d = build_tiny_lm(tmp_path / "m", hidden=64, layers=2, heads=2, vocab=512)
    cfg = AutoConfig.from_pretrained(d)
    tok = AutoTokenizer.from_pretrained(d)
    v, h, i = cfg.vocab_size, 64, 4 * 64
    per_layer = 4 * h * h + 3 * h * i + 2 * h  # attention, MLP, two RMSNorms
    assert count_parameters(d) == 2 * v * h + 2 * per_layer + h  # embeddings, lm_head, layers, final norm
    text = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
                                   tokenize=False, add_generation_prompt=True)  # fmt: skip
    assert text.index("S") < text.index("U") and text.endswith("<|assistant|>\n")
    assert tok.eos_token == "<|end|>"


def test_corpus_reads_real_captions_and_questions(shared_data):
    caps = list(iter_corpus_texts([shared_data / "capability" / "captions" / "gpt-4o-0806" / "scene.jsonl"],
                                  max_chars_per_file=5000))  # fmt: skip
    first = json.loads((shared_data / "capability" / "captions" / "gpt-4o-0806" / "scene.jsonl").open().readline())
    assert caps[0] == first["caption"]
    qs = list(iter_corpus_texts([shared_data / "vdc" / "short.jsonl"], max_chars_per_file=2000))
    assert any(t.startswith("What") for t in qs)


def test_head_dim_below_32_is_refused(tmp_path):
    with pytest.raises(ValueError, match="head_dim"):
        build_tiny_lm(tmp_path / "x", hidden=64, heads=4)
    with pytest.raises(FileNotFoundError, match="no-such"):
        list(iter_corpus_texts([tmp_path / "no-such"]))
