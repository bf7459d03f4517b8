"""A judge backed by vLLM's offline engine (`vllm.LLM`): large batches, prefix caching, structured outputs.

Requests arrive ordered so that those sharing a prefix (instructions, caption) are adjacent; the prompt is rendered
through the model's chat template (system, then user) and tokenized here, once, so that prompt length is checked per
request (a too-long prompt is a per-request error, never a failed batch) and the same token ids reach the engine.
Decoding is greedy (temperature 0 unless the request says otherwise) with the request's own seed. A request with
temperature None (official protocols that send no sampling parameters) gets the model's own defaults from its
`generation_config.json` (temperature, top_p, top_k, ...), as `vllm serve` applies them to a request that sets none;
a model without them gets vLLM's defaults (temperature 1.0). A request without a seed (None) draws from the engine's
own generator; one without max_tokens gets the rest of the model's context (vLLM needs a limit; an API without one
stops only there too).

`stream(feed, max_in_flight)` keeps the engine fed without batch barriers: it adds requests to vLLM's engine
(`LLMEngine.add_request`) whenever fewer than `max_in_flight` are unfinished and steps it (`LLMEngine.step`),
yielding each answer as it finishes. Requests arrive in caption order and are added in that order, so requests
sharing a caption are scheduled together and hit the prefix cache. Multimodal requests (images before the text,
as every backend sends them) go through `LLM.enqueue_chat`, which renders images with the model's processor.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Sequence

from capeval.adapters.base import JudgeRequest, JudgeResponse
from capeval.adapters.vllm_compat import close_engine, track_engine, vllm_engine_start_guard
from capeval.engine.params import REQUIRED, Param

# Files that define what a local model computes; their bytes make the default revision.
_REVISION_GLOBS = ("config.json", "generation_config.json", "*.safetensors", "*.bin", "tokenizer*.json", "*.model")


def model_revision(model: str) -> str:
    """Content hash of a local model directory's config, weights and tokenizer; the name itself for a hub id."""
    root = Path(model)
    if not root.is_dir():
        return model
    h = hashlib.sha256()
    for pattern in _REVISION_GLOBS:
        for f in sorted(root.glob(pattern)):
            h.update(f.name.encode() + b"\0")
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()[:16]


class VLLMJudge:
    """Judge protocol over `vllm.LLM`. Construction starts the engine (seconds on CPU with enforce_eager)."""

    params = (Param("model", (), REQUIRED, "a hub id or a local model folder"),
              Param("name", (str, type(None)), None, "judge name recorded in verdicts (default: the model)"),
              Param("revision", (str, type(None)), None, "part of every cache key (default: from the weights)"),
              Param("tensor_parallel_size", (int,), 1, "GPUs one engine spans", low=1),
              Param("max_model_len", (int,), 2048, "context length", low=1),
              Param("gpu_memory_utilization", (float,), 0.9, "share of GPU memory the engine takes", low=0, high=1,
                    low_open=True),
              Param("enable_prefix_caching", (bool,), True, "reuse the KV cache of shared prompt prefixes"),
              Param("enforce_eager", (bool, type(None)), None, "no CUDA graphs / torch.compile (default: on CPU)"),
              Param("max_num_seqs", (int, type(None)), None, "sequences vLLM schedules at once", low=1),
              Param("max_in_flight", (int, type(None)), None, "requests the judge loop keeps in flight", low=1),
              Param("seed", (int,), 0, "the engine's seed"),
              Param("dtype", (str,), "auto", "weights dtype"),
              Param("ignore_eos", (bool,), False, "decode every request to its max_tokens, past end-of-sequence "
                    "(benchmarks: equal output lengths; free-text requests only)"))
    passes_through = True  # other names are vLLM engine arguments

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        name: str | None = None,
        revision: str | None = None,
        tensor_parallel_size: int = 1,
        max_model_len: int = 2048,
        gpu_memory_utilization: float = 0.9,
        enable_prefix_caching: bool = True,
        enforce_eager: bool | None = None,
        max_num_seqs: int | None = None,
        max_in_flight: int | None = None,
        seed: int = 0,
        dtype: str = "auto",
        ignore_eos: bool = False,
        **llm_kwargs: Any,
    ):
        # Run the engine core in this process: no spawn (which needs a __main__ guard in every caller) and one
        # process less on small machines. An explicit setting by the user wins.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM
        from vllm.platforms import current_platform

        if max_in_flight is not None and (isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int)
                                          or max_in_flight < 1):
            raise ValueError(f"max_in_flight: expected an integer >= 1, got {max_in_flight!r}")
        model = str(model)
        self.model = model
        self.name = name or (Path(model).name if Path(model).is_dir() else model)
        self.revision = revision or model_revision(model)
        self.max_model_len = max_model_len
        self.enable_prefix_caching = enable_prefix_caching
        self.ignore_eos = bool(ignore_eos)
        if enforce_eager is None:  # torch.compile costs minutes of start-up on CPU for a small gain
            enforce_eager = current_platform.is_cpu()
        kwargs: dict[str, Any] = dict(
            model=model,
            tensor_parallel_size=tensor_parallel_size,
            max_model_len=max_model_len,
            enable_prefix_caching=enable_prefix_caching,
            enforce_eager=enforce_eager,
            seed=seed,
            dtype=dtype,
            disable_log_stats=False,  # keeps per-request timing and the prefix-cache counters
            # Compact JSON: no free whitespace between tokens (a random or weak model otherwise pads forever).
            structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True},
        )
        if not current_platform.is_cpu():
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if max_num_seqs is not None:
            kwargs["max_num_seqs"] = max_num_seqs
        # the checkpoint-loading bar goes with vLLM's INFO lines (VLLM_LOGGING_LEVEL; capeval sets ERROR unless
        # --verbose: engine/ray_local.py quiet_libraries)
        kwargs["use_tqdm_on_load"] = logging.getLogger("vllm").isEnabledFor(logging.INFO)
        kwargs.update(llm_kwargs)
        with vllm_engine_start_guard():  # see adapters/vllm_compat.py
            self._llm = LLM(**kwargs)
        track_engine(self._llm)
        self._tokenizer = self._llm.get_tokenizer()
        self._multimodal = bool(getattr(self._llm.model_config, "is_multimodal_model", False))
        self._has_template = bool(getattr(self._tokenizer, "chat_template", None))
        self._totals = {"requests": 0, "prompt_tokens": 0, "cached_prompt_tokens": 0, "completion_tokens": 0}
        try:  # what `vllm serve` applies to a request without sampling parameters
            defaults = self._llm.model_config.get_diff_sampling_param() or {}
        except Exception:  # noqa: BLE001 - no generation config: vLLM's own defaults
            defaults = {}
        self._default_sampling = {k: v for k, v in defaults.items()
                                  if k in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")}
        self._stream_ids = 0
        # The judge loop's window (capeval.engine.judging.window.judge_window): twice the engine's batch (max_num_seqs, as
        # vLLM chose it for this device), so that a finished sequence's slot is taken by a request already waiting
        # in the engine at the next step, while new requests are rendered and tokenized between steps.
        self.max_in_flight = max_in_flight or 2 * int(self._llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)

    # -- prompt rendering -------------------------------------------------------------------------------------------

    def render(self, request: JudgeRequest) -> list[int]:
        """Token ids of the prompt: chat template when the tokenizer has one (system, user), else raw text."""
        if self._has_template:
            messages = ([{"role": "system", "content": request.system}] if request.system else []) + [
                {"role": "user", "content": request.user}
            ]
            text = self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return list(self._tokenizer.encode(text, add_special_tokens=False))
        text = f"{request.system}\n\n{request.user}" if request.system else request.user
        return list(self._tokenizer.encode(text))

    def _sampling_params(self, request: JudgeRequest, prompt_len: int):
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = None
        # vLLM needs a limit; a request that sets none (official mode) gets the rest of the model's context, the
        # most an API without a limit could return for it
        room = self.max_model_len - prompt_len
        max_tokens = room if request.max_tokens is None else request.max_tokens
        if request.choices is not None:
            if not request.choices:
                raise ValueError("choices is empty")
            structured = StructuredOutputsParams(choice=list(request.choices))
            # A choice cut short by max_tokens is no choice at all: leave room for the longest one.
            longest = max(len(self._tokenizer.encode(c, add_special_tokens=False)) for c in request.choices)
            max_tokens = max(max_tokens, longest + 1)
        elif request.json_schema is not None:
            try:
                schema = json.loads(request.json_schema)
            except json.JSONDecodeError as exc:
                raise ValueError(f"json_schema is not valid JSON: {exc}") from None
            structured = StructuredOutputsParams(json=schema)
        if request.temperature is None:  # no sampling sent: the model's generation_config defaults
            sampling = dict(self._default_sampling)
        else:
            sampling = {"temperature": request.temperature}
        if self.ignore_eos and structured is not None:  # a grammar's end is an end-of-sequence: no fixed length
            raise ValueError("ignore_eos: choices and json_schema end the answer; send free-text requests")
        return SamplingParams(
            max_tokens=max(1, min(max_tokens, room)),
            seed=request.seed,
            structured_outputs=structured,
            ignore_eos=self.ignore_eos,
            **sampling,
        )

    def engine_request(self, request: JudgeRequest):
        """(TokensPrompt, SamplingParams) of a text request exactly as this judge hands it to the engine (the
        vLLM-ceiling benchmark gives the same pair to `LLM.generate`)."""
        from vllm.inputs import TokensPrompt

        ids = self.render(request)
        return TokensPrompt(prompt_token_ids=ids), self._sampling_params(request, len(ids))

    @property
    def llm(self):
        """The `vllm.LLM` this judge drives (benchmarks run vLLM's own `generate` on the same engine)."""
        return self._llm

    # -- Judge protocol ---------------------------------------------------------------------------------------------

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        from vllm.inputs import TokensPrompt

        responses: list[JudgeResponse | None] = [None] * len(requests)
        batch_idx: list[int] = []
        prompts: list[Any] = []
        params: list[Any] = []
        multimodal_idx: list[int] = []
        for i, req in enumerate(requests):
            try:
                if req.images:
                    if not self._multimodal:
                        raise ValueError(f"model {self.name!r} is text-only; request has {len(req.images)} image(s)")
                    multimodal_idx.append(i)
                    continue
                ids = self.render(req)
                n = len(ids)
                prompt = TokensPrompt(prompt_token_ids=ids)
                if n >= self.max_model_len:
                    raise ValueError(f"prompt has {n} tokens; max_model_len is {self.max_model_len}")
                params.append(self._sampling_params(req, n))
            except Exception as exc:  # noqa: BLE001 - reported per request, as the protocol requires
                responses[i] = JudgeResponse(key=req.key, text=None, error=f"{type(exc).__name__}: {exc}")
                continue
            batch_idx.append(i)
            prompts.append(prompt)
        if prompts:
            t0 = time.perf_counter()
            try:
                outputs = self._llm.generate(prompts, params, use_tqdm=False)
            except Exception:  # noqa: BLE001 - one bad request must not fail its batch: isolate it
                outputs = [self._generate_one(p, sp) for p, sp in zip(prompts, params)]
            wall = time.perf_counter() - t0
            for i, out in zip(batch_idx, outputs):
                responses[i] = self._response(requests[i], out, wall)
        if multimodal_idx:
            self._judge_multimodal(multimodal_idx, requests, responses)
        for r in responses:
            if r is not None:
                self._count(r)
        return responses  # type: ignore[return-value]

    def stream(self, feed, max_in_flight: int):
        """Continuous feeding (see the module docstring): yields one JudgeResponse per request taken from `feed`,
        in completion order; requests still unfinished when the consumer stops are aborted in the engine."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        engine = self._llm.llm_engine
        live: dict[str, tuple[JudgeRequest, float]] = {}
        alias: dict[str, str] = {}  # outputs may carry the external id or vLLM's internal "<id>-<8 chars>": both map
        try:
            while True:
                failed: list[JudgeResponse] = []
                room = max_in_flight - len(live)
                for req in feed.take(room) if room > 0 else []:
                    try:
                        if req.images:
                            if not self._multimodal:
                                raise ValueError(f"model {self.name!r} is text-only; request has "
                                                 f"{len(req.images)} image(s)")
                            (rid,) = self._llm.enqueue_chat([self._conversation(req)],
                                                            [self._sampling_params(req, 0)], use_tqdm=False)
                        else:
                            ids = self.render(req)
                            if len(ids) >= self.max_model_len:
                                raise ValueError(f"prompt has {len(ids)} tokens; max_model_len is "
                                                 f"{self.max_model_len}")
                            sp = self._sampling_params(req, len(ids))
                            sp.output_kind = RequestOutputKind.FINAL_ONLY
                            self._stream_ids += 1
                            rid = engine.add_request(f"capeval-stream-{self._stream_ids}",
                                                     TokensPrompt(prompt_token_ids=ids), sp)
                    except Exception as exc:  # noqa: BLE001 - reported for this request only
                        failed.append(JudgeResponse(key=req.key, text=None, error=f"{type(exc).__name__}: {exc}"))
                        continue
                    live[rid] = (req, time.perf_counter())
                    alias[rid] = rid
                    if len(rid) > 9 and rid[-9] == "-":
                        alias[rid[:-9]] = rid
                yield from failed
                if not live:
                    if feed.closed:
                        return
                    time.sleep(0.001)  # the consumer is still handing back answers
                    continue
                for out in engine.step():
                    rid = alias.get(out.request_id)
                    if not getattr(out, "finished", False) or rid not in live:
                        continue
                    req, t0 = live.pop(rid)
                    alias.pop(rid, None)
                    alias.pop(rid[:-9], None)
                    resp = self._response(req, out, time.perf_counter() - t0)
                    self._count(resp)
                    yield resp
        finally:
            if live:
                try:
                    engine.abort_request(list(live))
                except Exception:  # noqa: BLE001 - best effort on shutdown
                    pass

    def _count(self, r: JudgeResponse) -> None:
        if r.error is None:
            self._totals["requests"] += 1
            self._totals["prompt_tokens"] += r.prompt_tokens
            self._totals["cached_prompt_tokens"] += r.cached_prompt_tokens
            self._totals["completion_tokens"] += r.completion_tokens

    @staticmethod
    def _conversation(req: JudgeRequest) -> list[dict]:
        """Chat messages with the images first, then the text (as every backend sends them)."""
        content: list[dict] = [
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(b).decode()}}
            for b in req.images
        ]
        content.append({"type": "text", "text": req.user})
        system = [{"role": "system", "content": req.system}] if req.system else []
        return system + [{"role": "user", "content": content}]

    def _generate_one(self, prompt, sp):
        try:
            return self._llm.generate([prompt], [sp], use_tqdm=False)[0]
        except Exception as exc:  # noqa: BLE001
            return exc

    @staticmethod
    def _response(req: JudgeRequest, out, wall: float) -> JudgeResponse:
        if isinstance(out, Exception):
            return JudgeResponse(key=req.key, text=None, error=f"{type(out).__name__}: {out}")
        completion = out.outputs[0]
        m = getattr(out, "metrics", None)
        latency = wall
        if m is not None and getattr(m, "last_token_ts", 0) and getattr(m, "queued_ts", 0):
            latency = max(0.0, m.last_token_ts - m.queued_ts)  # engine time from queueing to the last token
        return JudgeResponse(
            key=req.key,
            text=completion.text,
            prompt_tokens=len(out.prompt_token_ids or ()),
            cached_prompt_tokens=int(out.num_cached_tokens or 0),
            completion_tokens=len(completion.token_ids),
            latency_s=latency,
        )

    def _judge_multimodal(self, idx: list[int], requests: Sequence[JudgeRequest], out: list) -> None:
        """Requests with images go through `LLM.chat` (vLLM renders images with the model's processor); a prompt
        that is too long is rejected by vLLM and reported for that request only."""
        convs, params, kept = [], [], []
        for i in idx:
            req = requests[i]
            try:
                sp = self._sampling_params(req, 0)
            except Exception as exc:  # noqa: BLE001
                out[i] = JudgeResponse(key=req.key, text=None, error=f"{type(exc).__name__}: {exc}")
                continue
            convs.append(self._conversation(req))
            params.append(sp)
            kept.append(i)
        if not kept:
            return
        t0 = time.perf_counter()
        try:
            outputs = self._llm.chat(convs, params, use_tqdm=False)
        except Exception:  # noqa: BLE001 - isolate the failing request
            outputs = []
            for c, sp in zip(convs, params):
                try:
                    outputs.append(self._llm.chat([c], [sp], use_tqdm=False)[0])
                except Exception as exc:  # noqa: BLE001
                    outputs.append(exc)
        wall = time.perf_counter() - t0
        for i, o in zip(kept, outputs):
            out[i] = self._response(requests[i], o, wall)

    # -- statistics -------------------------------------------------------------------------------------------------

    def prefix_cache_stats(self) -> dict[str, float]:
        """Prefix-cache use: engine counters (token queries/hits, from vLLM metrics) and this judge's own totals
        (cached prompt tokens / prompt tokens over the requests it answered)."""
        stats: dict[str, float] = dict(self._totals)
        stats["hit_share"] = (
            self._totals["cached_prompt_tokens"] / self._totals["prompt_tokens"] if self._totals["prompt_tokens"] else 0.0
        )
        try:
            for metric in self._llm.get_metrics():
                if metric.name in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"):
                    key = "engine_" + metric.name.split(":", 1)[1]
                    stats[key] = stats.get(key, 0) + float(metric.value)
        except Exception:  # noqa: BLE001 - metrics are optional (stat logging may be off)
            pass
        return stats

    def reset_prefix_cache(self) -> bool:
        """Forget cached prefixes (for measurements that must start cold)."""
        return bool(self._llm.reset_prefix_cache())

    def close(self) -> None:
        llm = getattr(self, "_llm", None)
        if llm is None:
            return
        self._llm = None
        close_engine(llm)  # adapters/vllm_compat.py: never tears down another in-process engine's state
        del llm
        gc.collect()
