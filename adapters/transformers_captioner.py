"""Hugging Face transformers captioner ("transformers"): any image-text-to-text / video model, run in-process.

For the models vLLM does not serve (or to check a vLLM caption against the reference implementation): the model's
`AutoProcessor` and its model class (`AutoModelForImageTextToText` unless `model_class` names the family's class),
the prompt rendered with the model's own chat template, and `model.generate`.

Video input is the vLLM captioner's (adapters/vlm_video_inputs.py): the frame spec's frames as one video with the
metadata of their timestamps (`video_metadata`, as a transformers `VideoMetadata`) and `do_sample_frames=False`, so
the processor never re-picks frames (Qwen3-VL's and GLM-4.1V's released configs default to sampling) and the
families that read timing (Qwen2.5-VL's seconds per temporal patch, Qwen3-VL's per-frame time stamps) get the
frames' real seconds. Frames go in as one video when the processor has a video processor, else as one image per
frame (`frame_input` overrides the guess); a still image (`media_type="image"`) is always an image. So for the same
request this captioner and the vLLM captioner hand the family's processor the same prompt, frames and metadata
(tests/adapters/test_transformers_captioner.py compares the processed inputs of both).

Streaming: `acaption(request)` (capeval.adapters.base.StreamingCaptioner) queues the request for the one generation
thread, which takes whatever is queued when it is free, up to `max_batch` requests that can share one `generate`
call (same max_tokens and temperature, same media kind and frame shape, so no frame is padded or resized to fit
another; a sampled request, temperature > 0, runs alone with its own seed), and runs them as one left-padded batch; the caption stage keeps `max_in_flight` requests queued per
instance. A batch whose processing or generation fails is retried one request at a time, so a bad request fails
alone, as a CaptionResponse error, never an exception.

Reasoning: the whole reply comes back as `text` (special tokens skipped, as vLLM detokenizes); the caption stage
splits a thinking model's reasoning off with the captioner's `reasoning_tags` (engine/reasoning.py).

Placement: `device_map` goes to `from_pretrained` as given ("auto" spreads a large model over the GPUs); unset, the
model goes on the first GPU, else the CPU. `dtype` is the weights' dtype ("auto": the checkpoint's).
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from capeval.adapters.base import CaptionRequest, CaptionResponse
from capeval.adapters.checkpoints import model_revision
from capeval.adapters.vlm_video_inputs import check_frames, video_metadata
from capeval.engine.params import REQUIRED, Param
from capeval.engine.reasoning import parse_tags

DEFAULT_MAX_BATCH = 8
DEFAULT_MAX_IN_FLIGHT = 32


@dataclass
class PreparedRequest:
    """One request rendered for the processor: its prompt text and frames in the form the processor takes."""

    request: CaptionRequest
    prompt: str
    sent_as: str  # "video" | "images"
    videos: list = field(default_factory=list)  # one (T, H, W, 3) uint8 array, when sent as a video
    metadata: list = field(default_factory=list)  # its transformers VideoMetadata
    images: list = field(default_factory=list)  # PIL images, when sent as images

    def batch_key(self) -> tuple:
        """Requests with the same key go through one processor call and one `generate`: same generation settings,
        same media and frame geometry (so the processor pads or resizes nothing to fit another request)."""
        r = self.request
        shape = tuple(self.videos[0].shape) if self.videos else tuple((im.size, im.mode) for im in self.images)
        # a sampled request runs alone, seeded with its own seed: its caption never depends on what shared its batch
        alone = (r.key, int(r.seed)) if r.temperature > 0 else None
        return (r.max_tokens, float(r.temperature), alone, self.sent_as, shape)


class TransformersCaptioner:
    """Hugging Face transformers captioner: processor + model class + chat template, batched `generate`."""

    params = (Param("model", (str,), REQUIRED, "a hub id or a local model folder"),
              Param("revision", (str, type(None)), None,
                    "weights identity in caption keys (default: from the weights)"),
              Param("model_class", (str,), "auto",
                    "the transformers class to load (auto: AutoModelForImageTextToText), e.g. "
                    "Qwen2_5_VLForConditionalGeneration"),
              Param("dtype", (str,), "auto", "weights dtype: auto (the checkpoint's), bfloat16, float16, float32"),
              Param("device_map", (str, type(None)), None,
                    "where the weights go, as from_pretrained takes it (auto, cpu, cuda:0 ...); default: the first "
                    "GPU, else the CPU"),
              Param("attn_implementation", (str, type(None)), None,
                    "attention kernel (sdpa, eager, flash_attention_2); default: transformers' choice"),
              Param("trust_remote_code", (bool,), False, "run the checkpoint's own modelling code (models without a "
                    "transformers class)"),
              Param("frame_input", (str,), "auto", "frames as one video or as images (auto: by the model's processor)",
                    choices=("auto", "video", "images")),
              Param("max_frames", (int,), 64, "frames one request may carry when sent as images", low=1),
              Param("system", (str, type(None)), None, "system message sent with every prompt"),
              Param("max_batch", (int,), DEFAULT_MAX_BATCH, "requests in one generate call", low=1),
              Param("max_in_flight", (int,), DEFAULT_MAX_IN_FLIGHT, "requests kept queued per instance", low=1),
              Param("reasoning_tags", (list, str, type(None)), None,
                    'a thinking model\'s reasoning tags, stripped from captions (default ["<think>", "</think>"]; '
                    '"none": keep everything)'))

    def __init__(self, model: str, *, revision: str | None = None, model_class: str = "auto", dtype: str = "auto",
                 device_map: str | None = None, attn_implementation: str | None = None,
                 trust_remote_code: bool = False, frame_input: str = "auto", max_frames: int = 64,
                 system: str | None = None, max_batch: int = DEFAULT_MAX_BATCH,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, reasoning_tags: list | str | None = None):
        import torch
        import transformers
        from transformers import AutoProcessor

        parse_tags(reasoning_tags)  # a bad value fails here, naming the field, not at the first caption
        self.reasoning_tags = reasoning_tags
        self.name = f"transformers:{Path(model).name}"
        self.model_id = model
        self.revision = revision or model_revision(model)
        self.system = system
        self.max_frames = int(max_frames)
        self.max_batch = max(1, int(max_batch))
        self.max_in_flight = max(1, int(max_in_flight))
        self.processor = AutoProcessor.from_pretrained(model, revision=revision, trust_remote_code=trust_remote_code)
        if frame_input == "auto":  # a processor that can take a video has a video processor; others take images
            frame_input = "video" if getattr(self.processor, "video_processor", None) is not None else "images"
        if frame_input not in ("video", "images"):
            raise ValueError(f"frame_input must be 'auto', 'video' or 'images', got {frame_input!r}")
        self.frame_input = frame_input
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.tokenizer.padding_side = "left"  # batched generation of a decoder: prompts end where generation starts
        cls = transformers.AutoModelForImageTextToText if model_class == "auto" else getattr(transformers,
                                                                                             model_class, None)
        if cls is None:
            raise ValueError(f"model_class {model_class!r} is not a transformers class")
        load: dict[str, Any] = {"revision": revision, "dtype": dtype, "trust_remote_code": trust_remote_code}
        if device_map is not None:
            load["device_map"] = device_map
        if attn_implementation is not None:
            load["attn_implementation"] = attn_implementation
        self.model = cls.from_pretrained(model, **load)
        if device_map is None:
            self.model.to("cuda" if torch.cuda.is_available() else "cpu")
        self.model.eval()
        self.visual_token_ids = _visual_token_ids(self.model.config, self.processor)
        # for tests: called as on_inputs(request, input_ids) from the generation thread before generating (the
        # token ids, padding removed, show what the model saw)
        self.on_inputs: Callable[[CaptionRequest, list[int]], None] | None = None
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="capeval-transformers-generate", daemon=True)
        self._thread.start()

    @classmethod
    def static_revision(cls, params: dict) -> str:
        """Used for content keys before the model is loaded (capeval.engine.sweep.runner.component_revision)."""
        return params.get("revision") or model_revision(params["model"])

    # -- processor inputs -------------------------------------------------------------------------------------------
    def prompt(self, r: CaptionRequest, visual: list[dict]) -> str:
        """The request's prompt rendered with the model's chat template, `visual` parts before the text."""
        text = r.prompt if not r.context else f"{r.context}\n\n{r.prompt}"
        system = r.system or self.system
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": visual + [{"type": "text", "text": text}]}
        ]
        return self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def prepare(self, r: CaptionRequest) -> PreparedRequest:
        """The request as the processor takes it; ValueError for frames it cannot take."""
        from transformers.video_utils import VideoMetadata

        frames = check_frames(r.frames)
        if self.frame_input == "video" and r.media_type != "image":
            meta = {k: v for k, v in video_metadata(len(frames), r.timestamps).items() if k != "do_sample_frames"}
            meta.update(height=int(frames.shape[1]), width=int(frames.shape[2]))
            return PreparedRequest(r, self.prompt(r, [{"type": "video"}]), "video", videos=[frames],
                                   metadata=[VideoMetadata(**meta)])  # fmt: skip
        limit = self.max_frames if self.frame_input == "images" else 1
        if len(frames) > limit:
            what = "max_frames" if self.frame_input == "images" else "one still image per request"
            raise ValueError(f"{len(frames)} frames; this captioner takes at most {what}={limit}")
        from PIL import Image

        images = [Image.fromarray(f) for f in frames]
        return PreparedRequest(r, self.prompt(r, [{"type": "image"}] * len(images)), "images", images=images)

    def processor_inputs(self, batch: Sequence[PreparedRequest]):
        """The processor's output (a BatchFeature of input_ids, attention_mask, pixel values, grids ...) for
        requests of one batch key: exactly what `generate` is given."""
        kwargs: dict[str, Any] = {"text": [p.prompt for p in batch], "padding": True, "return_tensors": "pt"}
        if batch[0].sent_as == "video":
            kwargs.update(videos=[p.videos[0] for p in batch], video_metadata=[p.metadata[0] for p in batch],
                          do_sample_frames=False)  # fmt: skip
        else:
            kwargs["images"] = [p.images for p in batch]
        return self.processor(**kwargs)

    # -- generation -------------------------------------------------------------------------------------------------
    def _generate(self, batch: list[PreparedRequest]) -> list[CaptionResponse]:
        import torch

        t0 = time.perf_counter()
        features = self.processor_inputs(batch)
        ids, mask = features["input_ids"], features["attention_mask"]
        if self.on_inputs is not None:
            for i, p in enumerate(batch):
                self.on_inputs(p.request, ids[i][mask[i].bool()].tolist())
        r = batch[0].request
        sampling = r.temperature > 0
        options: dict[str, Any] = {"max_new_tokens": int(r.max_tokens), "do_sample": sampling,
                                   "pad_token_id": self.tokenizer.pad_token_id
                                   if self.tokenizer.pad_token_id is not None else self._eos_ids()[0]}
        if sampling:
            options["temperature"] = float(r.temperature)
            torch.manual_seed(int(r.seed))
        else:  # greedy: no sampling settings from the checkpoint's generation_config (they only warn)
            options.update(temperature=None, top_p=None, top_k=None)
        with torch.inference_mode():  # float32 pixels: each family's model casts them to its weights' dtype
            out = self.model.generate(**features.to(self.model.device), **options)
        latency = time.perf_counter() - t0
        eos = set(self._eos_ids())
        responses = []
        for i, p in enumerate(batch):
            generated = out[i, ids.shape[1]:].tolist()
            end = next((k + 1 for k, t in enumerate(generated) if t in eos), None)
            kept = generated[:end] if end is not None else generated
            text = self.tokenizer.decode(kept, skip_special_tokens=True).strip()
            responses.append(CaptionResponse(p.request.key, text, prompt_tokens=int(mask[i].sum()),
                                             n_tokens=len(kept), latency_s=latency,
                                             truncated=end is None and len(kept) >= int(r.max_tokens),
                                             processor_inputs=self.processor_report(p, features, i)))
        return responses

    def processor_report(self, p: PreparedRequest, features, row: int) -> dict:
        """The frames-seen ledger's report of one request (capeval.adapters.base.CaptionResponse.processor_inputs):
        the video metadata and kwargs given to the processor, a frame's size after the processor's resize and the
        visual tokens it put in the prompt (row `row` of the processed batch `features`)."""
        report: dict[str, Any] = {"backend": "transformers", "sent_as": p.sent_as}
        if p.sent_as == "video":
            report["metadata"] = {k: v for k, v in dict(p.metadata[0]).items() if v is not None}
            report["processor_kwargs"] = {"do_sample_frames": False}
        size = _processed_size(self.processor, features, row, p.sent_as)
        if size is not None:
            report["processed_size"] = size
        if self.visual_token_ids:
            ids = features["input_ids"][row][features["attention_mask"][row].bool()].tolist()
            report["visual_tokens"] = sum(ids.count(t) for t in self.visual_token_ids)
        return report

    def _eos_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None] or [-1]

    def _run_batch(self, batch: list[PreparedRequest]) -> list[CaptionResponse]:
        try:
            return self._generate(batch)
        except Exception as exc:  # noqa: BLE001 - retried alone below, so only the request that fails fails
            if len(batch) == 1:
                return [CaptionResponse(batch[0].request.key, None, error=f"{type(exc).__name__}: {exc}")]
        return [self._run_batch([p])[0] for p in batch]

    def _run(self) -> None:
        """The generation thread: the model is touched only here, one batch at a time."""
        pending: list[tuple[PreparedRequest, Callable]] = []
        while True:
            items = self._inbox.get() if not pending else self._poll()
            while items is not None and items is not _EMPTY:
                pending.extend(items)
                items = self._poll()
            if items is None:  # close(): fail what is left
                for p, deliver in pending:
                    _deliver(deliver, CaptionResponse(p.request.key, None,
                                                      error="RuntimeError: the captioner was closed"))
                return
            if not pending:
                continue
            key = pending[0][0].batch_key()
            batch = [it for it in pending if it[0].batch_key() == key][: self.max_batch]
            taken = {id(it) for it in batch}
            pending = [it for it in pending if id(it) not in taken]
            for resp, (_, deliver) in zip(self._run_batch([p for p, _ in batch]), batch):
                _deliver(deliver, resp)

    def _poll(self):
        try:
            return self._inbox.get_nowait()
        except queue.Empty:
            return _EMPTY

    def _submit(self, requests: Sequence[CaptionRequest], delivers: Sequence[Callable[[CaptionResponse], None]]):
        """Queue requests for the generation thread, all at once (so a `caption` call's requests can share
        batches); a request the processor cannot take fails at once, alone."""
        queued = []
        for r, deliver in zip(requests, delivers):
            try:
                queued.append((self.prepare(r), deliver))
            except Exception as exc:  # noqa: BLE001 - a bad request fails alone
                deliver(CaptionResponse(r.key, None, error=f"{type(exc).__name__}: {exc}"))
        if not queued:
            return
        if self._thread is None or not self._thread.is_alive():
            for p, deliver in queued:
                deliver(CaptionResponse(p.request.key, None, error="RuntimeError: the captioner was closed"))
            return
        self._inbox.put(queued)

    # -- the two ways in --------------------------------------------------------------------------------------------
    async def acaption(self, request: CaptionRequest) -> CaptionResponse:
        """One caption; many may be outstanding at once (queued ones are generated together)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def deliver(resp: CaptionResponse) -> None:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(resp))

        self._submit([request], [deliver])
        return await fut

    def caption(self, requests: Sequence[CaptionRequest]) -> list[CaptionResponse]:
        futures: list[Future] = [Future() for _ in requests]
        self._submit(requests, [f.set_result for f in futures])
        return [f.result() for f in futures]

    def close(self) -> None:
        thread, self._thread = getattr(self, "_thread", None), None
        if thread is not None:
            self._inbox.put(None)
            thread.join()
        model, self.model = getattr(self, "model", None), None
        if model is not None:
            del model
            import gc

            gc.collect()

    def describe(self) -> str:
        return json.dumps({"model": self.model_id, "revision": self.revision, "frame_input": self.frame_input})


_EMPTY = object()


def _deliver(deliver: Callable[[CaptionResponse], None], response: CaptionResponse) -> None:
    """Hand a response over from the generation thread; a caller gone (its event loop closed) must not stop the
    thread every other request depends on."""
    try:
        deliver(response)
    except Exception:  # noqa: BLE001 - see above
        pass


def _processed_size(processor, features, row: int, sent_as: str) -> str | None:
    """"WxH" of one frame as the processor resized it, for row `row` of a processed batch: from the patch grid
    (Qwen-style processors: grid x patch size), else from the pixel tensor's last two axes; None when neither
    says."""
    grid = features.get("video_grid_thw" if sent_as == "video" else "image_grid_thw")
    sub = getattr(processor, "video_processor" if sent_as == "video" else "image_processor", None)
    patch = getattr(sub, "patch_size", None)
    if grid is not None and isinstance(patch, int) and row < len(grid):
        _, h, w = (int(v) for v in grid[row])
        return f"{w * patch}x{h * patch}"
    for name in ("pixel_values_videos", "pixel_values"):
        pixels = features.get(name)
        if pixels is not None and getattr(pixels, "ndim", 0) >= 4:
            return f"{int(pixels.shape[-1])}x{int(pixels.shape[-2])}"
    return None


def _visual_token_ids(config, processor) -> set[int]:
    """Ids of the placeholder tokens the processor expands into visual tokens (the model's image and video token),
    from the model config or, failing that, the processor."""
    ids: set[int] = set()
    for holder in (config, processor):
        for name in ("image_token_id", "image_token_index", "video_token_id", "video_token_index"):
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                ids.add(value)
    return ids
