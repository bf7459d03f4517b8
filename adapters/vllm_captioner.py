"""vLLM offline-engine captioner ("vllm"): frames in as video (`multi_modal_data={"video": ...}`), caption out.

One instance holds one `vllm.LLM`; the caption stage (engine/stages/caption.py) runs one instance per GPU as a Ray
actor (num_gpus=1), so a sweep scales by adding GPUs. The prompt is rendered with the model's own chat template
(from its HF processor) with one video placeholder, so any vLLM video-capable VLM works (Qwen2/2.5-VL,
LLaVA-OneVision, InternVL ...). Per-request failures become CaptionResponse errors, never exceptions.

Frames go in as one video when the model's processor has a video processor (Qwen2/2.5-VL, LLaVA-OneVision ...), else
as one image per frame (Idefics3, ...); `frame_input="video"|"images"` overrides the guess. On a CPU platform the
engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0 unless set) and eager (no torch.compile start-up).

Tested on vLLM's CPU build with a tiny random-weight Idefics3 (adapters/random_vlm.py,
tests/adapters/test_adapters_vllm_vlm.py: frames as images) and by a GPU test
(tests/pipeline/test_pipeline_vllm_captioner_gpu.py, skipped without CUDA). Video input is untested on CPU: every
video-capable HF processor needs torchvision, which this environment lacks.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from adapters.base import CaptionRequest, CaptionResponse
from adapters.vllm_compat import close_engine, track_engine, vllm_engine_start_guard
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
                 max_frames: int = 64, frame_input: str = "auto", system: str | None = None,
                 enforce_eager: bool | None = None, **engine_kwargs):
        import os

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: no spawn, no __main__ guard
        from transformers import AutoProcessor
        from vllm import LLM
        from vllm.platforms import current_platform

        self.name = f"vllm:{Path(model).name}"
        self.model = model
        self.revision = revision or _model_revision(model)
        self.system = system
        self.processor = AutoProcessor.from_pretrained(model, revision=revision)
        if frame_input == "auto":  # a processor that can take a video has a video processor; others take images
            frame_input = "video" if getattr(self.processor, "video_processor", None) is not None else "images"
        if frame_input not in ("video", "images"):
            raise ValueError(f"frame_input must be 'auto', 'video' or 'images', got {frame_input!r}")
        self.frame_input = frame_input
        self.max_frames = max_frames
        limits = {"video": limit_videos, "image": 0} if frame_input == "video" else {"image": max_frames}
        if enforce_eager is None:  # torch.compile costs minutes of start-up on CPU for a small gain
            enforce_eager = current_platform.is_cpu()
        if not current_platform.is_cpu():
            engine_kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        with vllm_engine_start_guard():  # see adapters/vllm_compat.py
            self.llm = LLM(model=model, revision=revision, max_model_len=max_model_len, dtype=dtype,
                           enforce_eager=enforce_eager, limit_mm_per_prompt=limits, **engine_kwargs)
        track_engine(self.llm)

    @classmethod
    def static_revision(cls, params: dict) -> str:
        """Used for content keys before the engine is loaded (engine.sweep.runner.component_revision)."""
        return params.get("revision") or _model_revision(params["model"])

    def _prompt(self, r: CaptionRequest, n_images: int = 0) -> str:
        text = r.prompt if not r.context else f"{r.context}\n\n{r.prompt}"
        visual = [{"type": "image"}] * n_images if self.frame_input == "images" else [{"type": "video"}]
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": visual + [{"type": "text", "text": text}]}
        ]
        return self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _input(self, r: CaptionRequest) -> dict:
        frames = r.frames
        if not isinstance(frames, np.ndarray) or frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
            got = getattr(frames, "shape", type(frames).__name__), getattr(frames, "dtype", None)
            raise ValueError(f"frames must be uint8 (T, H, W, 3), got shape/dtype {got}")
        if len(frames) == 0:
            raise ValueError("frames is empty")
        if self.frame_input == "video":
            return {"prompt": self._prompt(r), "multi_modal_data": {"video": frames}}
        if len(frames) > self.max_frames:
            raise ValueError(f"{len(frames)} frames; this captioner takes at most max_frames={self.max_frames}")
        from PIL import Image

        images = [Image.fromarray(np.ascontiguousarray(f)) for f in frames]
        return {"prompt": self._prompt(r, len(images)), "multi_modal_data": {"image": images}}

    def caption(self, requests: Sequence[CaptionRequest]) -> list[CaptionResponse]:
        from vllm import SamplingParams

        out: list[CaptionResponse | None] = [None] * len(requests)
        inputs, params, index = [], [], []
        for i, r in enumerate(requests):
            try:
                inputs.append(self._input(r))
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
        if llm is None:
            return
        close_engine(llm)  # the engine core holds the KV cache until shut down (adapters/vllm_compat.py)
        del llm
        import gc

        gc.collect()

    def describe(self) -> str:
        return json.dumps({"model": self.model, "revision": self.revision, "frame_input": self.frame_input})
