"""vLLM offline-engine captioner ("vllm"): frames in as video (`multi_modal_data={"video": ...}`), caption out.

One instance holds one `vllm.LLM`; the caption stage (engine/stages/caption.py) runs one instance per GPU as a Ray
actor (num_gpus=1), so a sweep scales by adding GPUs. The prompt is rendered with the model's own chat template
(from its HF processor) with one video placeholder, so any vLLM video-capable VLM works (Qwen2/2.5-VL,
LLaVA-OneVision, InternVL ...). Per-request failures become CaptionResponse errors, never exceptions.

Status: written against vLLM's documented offline multimodal API; it is exercised only by a GPU test
(tests/pipeline/test_pipeline_vllm_captioner_gpu.py, skipped without CUDA). Tiny random-weight VLMs on the CPU build were not
tried in this session (time box).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Sequence

from adapters.base import CaptionRequest, CaptionResponse
from engine.registry import register_captioner


def _model_revision(model: str) -> str:
    """Weights identity: a local folder's config + weight file names and sizes, else the hub id (+ revision)."""
    path = Path(model)
    if path.is_dir():
        h = hashlib.sha256()
        for p in sorted(path.iterdir()):
            if p.suffix in (".json", ".safetensors", ".bin"):
                h.update(f"{p.name}:{p.stat().st_size}".encode())
                if p.name == "config.json":
                    h.update(p.read_bytes())
        return f"dir:{h.hexdigest()[:16]}"
    return f"hub:{model}"


@register_captioner("vllm")
class VLLMCaptioner:
    def __init__(self, model: str, *, revision: str | None = None, max_model_len: int = 16384,
                 gpu_memory_utilization: float = 0.85, dtype: str = "auto", limit_videos: int = 1,
                 system: str | None = None, **engine_kwargs):
        from vllm import LLM

        self.name = f"vllm:{Path(model).name}"
        self.model = model
        self.revision = revision or _model_revision(model)
        self.system = system
        self.llm = LLM(model=model, revision=revision, max_model_len=max_model_len, dtype=dtype,
                       gpu_memory_utilization=gpu_memory_utilization,
                       limit_mm_per_prompt={"video": limit_videos, "image": 0}, **engine_kwargs)
        from transformers import AutoProcessor

        self.processor = AutoProcessor.from_pretrained(model, revision=revision)

    @classmethod
    def static_revision(cls, params: dict) -> str:
        """Used for content keys before the engine is loaded (engine.sweep.runner.component_revision)."""
        return params.get("revision") or _model_revision(params["model"])

    def _prompt(self, r: CaptionRequest) -> str:
        text = r.prompt if not r.context else f"{r.context}\n\n{r.prompt}"
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": text}]}
        ]
        return self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def caption(self, requests: Sequence[CaptionRequest]) -> list[CaptionResponse]:
        from vllm import SamplingParams

        out: list[CaptionResponse | None] = [None] * len(requests)
        inputs, params, index = [], [], []
        for i, r in enumerate(requests):
            try:
                inputs.append({"prompt": self._prompt(r), "multi_modal_data": {"video": r.frames}})
                params.append(SamplingParams(max_tokens=r.max_tokens, temperature=r.temperature, seed=r.seed))
                index.append(i)
            except Exception as exc:  # noqa: BLE001 - a bad request fails alone
                out[i] = CaptionResponse(r.key, None, error=f"{type(exc).__name__}: {exc}")
        t0 = time.perf_counter()
        try:
            results = self.llm.generate(inputs, params, use_tqdm=False) if inputs else []
        except Exception as exc:  # noqa: BLE001 - the engine failed the batch: report per request
            for i in index:
                out[i] = CaptionResponse(requests[i].key, None, error=f"{type(exc).__name__}: {exc}")
            return out  # type: ignore[return-value]
        latency = (time.perf_counter() - t0) / max(1, len(index))
        for i, res in zip(index, results):
            completion = res.outputs[0]
            out[i] = CaptionResponse(requests[i].key, completion.text.strip(), prompt_tokens=len(res.prompt_token_ids or []),
                                     n_tokens=len(completion.token_ids), latency_s=latency)
        return out  # type: ignore[return-value]

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        del llm

    def describe(self) -> str:
        return json.dumps({"model": self.model, "revision": self.revision})
