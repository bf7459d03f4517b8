"""The vLLM captioner renders each distinct prompt with its model's chat template once (adapters/vllm_captioner.py
`_render`): the text it sends is the template's own output for that request, byte for byte, whichever request asked
first, and the cache stays bounded. No engine is started: the processor alone renders."""

from __future__ import annotations

import numpy as np

from capeval.adapters import vllm_captioner
from capeval.adapters.base import CaptionRequest
from capeval.adapters.checkpoints import model_cache
from capeval.testing.random_vlm_families import build_tiny_vlm


def _captioner(system=None):
    from transformers import AutoProcessor

    cap = vllm_captioner.VLLMCaptioner.__new__(vllm_captioner.VLLMCaptioner)  # no engine: prompts only
    cap.processor = AutoProcessor.from_pretrained(build_tiny_vlm("qwen2_vl", model_cache() / "tiny-qwen2-vl"))
    cap.system, cap.frame_input, cap.max_frames, cap.rendered_prompts = system, "video", 64, {}
    return cap


def _counting(cap, monkeypatch) -> list:
    """The template renders the captioner asks its processor for."""
    calls: list = []
    render = cap.processor.apply_chat_template

    def counted(messages, **kwargs):
        calls.append(messages)
        return render(messages, **kwargs)

    monkeypatch.setattr(cap.processor, "apply_chat_template", counted)
    return calls


def _template(cap, text, system, parts):
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": [{"type": p} for p in parts] + [{"type": "text", "text": text}]}]
    return cap.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_each_request_gets_the_templates_own_text(monkeypatch):
    cap = _captioner(system="Be brief.")
    renders = _counting(cap, monkeypatch)
    frames = np.zeros((4, 32, 32, 3), np.uint8)
    asks = [CaptionRequest("a", "Describe.", frames, (0.0, 0.5, 1.0, 1.5)),
            CaptionRequest("b", "Describe.", frames, (0.0, 0.5, 1.0, 1.5)),
            CaptionRequest("c", "Describe.", frames, (), context="Earlier: a cat."),
            CaptionRequest("d", "Describe.", frames, (), system="Answer in French."),
            CaptionRequest("e", "Describe.", frames[:1], (), media_type="image")]
    for r in asks + asks[::-1]:  # again in the other order: served from the cache, still the template's text
        text = r.prompt if not r.context else f"{r.context}\n\n{r.prompt}"
        part = "image" if r.media_type == "image" else "video"
        expected = _template(cap, text, r.system or "Be brief.", (part,))
        assert cap.engine_inputs(r)["prompt"] == expected
    assert len(renders) == 4 + 2 * len(asks)  # 4 distinct prompts rendered once each (a and b share one), plus
    # the test's own two renders per request


def test_the_cache_stays_bounded(monkeypatch):
    monkeypatch.setattr(vllm_captioner, "RENDERED_PROMPTS", 3)
    cap = _captioner()
    renders = _counting(cap, monkeypatch)
    frames = np.zeros((4, 32, 32, 3), np.uint8)

    def ask(i: int) -> str:
        return cap.engine_inputs(CaptionRequest(f"k{i}", "Describe.", frames, (), context=f"segment {i}"))["prompt"]

    for i in range(3):
        ask(i)
    ask(0)
    assert len(renders) == 3  # all three kept
    ask(3)  # a fourth distinct prompt: the cache starts over rather than grow
    ask(0)
    assert len(renders) == 5
    assert ask(0) == _template(cap, "segment 0\n\nDescribe.", None, ("video",)) and len(renders) == 6
