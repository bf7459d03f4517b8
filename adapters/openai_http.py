"""OpenAI-compatible HTTP backends: a judge (`OpenAIJudge`) and a multimodal captioner (`OpenAICaptioner`).

Both share `_ChatRunner`: one AsyncOpenAI client on a private event-loop thread (so the sync `judge()`/`caption()`
work from any thread, with or without a running loop, and the connection pool is reused across batches), a
semaphore bounding requests in flight, and our own retry loop (the SDK's retries are off) with exponential backoff
+ full jitter that honours Retry-After. Failures are reported per request; a batch never raises for one request.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import io
import json
import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from adapters.base import CaptionRequest, CaptionResponse, JudgeRequest, JudgeResponse
from engine.registry import register_captioner, register_judge

log = logging.getLogger(__name__)

STRUCTURED_MODES = ("openai", "vllm", "none")
# 4xx statuses worth retrying: request timeout, conflict, rate limit. Every other 4xx is the request's fault.
RETRYABLE_4XX = (408, 409, 429)


@dataclass
class HTTPConfig:
    model: str = "gpt-4-turbo"
    base_url: str | None = None  # None: api.openai.com
    api_key: str | None = None  # else $CAPEVAL_JUDGE_API_KEY, else $OPENAI_API_KEY ("EMPTY" for a custom base_url)
    revision: str = ""  # part of every cache key; defaults to the model name
    structured: str = "openai"  # "openai": response_format json_schema; "vllm": extra_body structured_outputs; "none"
    max_in_flight: int = 64
    timeout_s: float = 120.0  # per attempt
    max_attempts: int = 6
    backoff_base_s: float = 0.5
    backoff_max_s: float = 60.0  # also caps Retry-After
    price_prompt_per_m: float = 0.0  # USD per 1M uncached prompt tokens
    price_cached_per_m: float | None = None  # USD per 1M cached prompt tokens; None: same as uncached
    price_completion_per_m: float = 0.0
    max_images: int = 16  # captioner: frames per request, subsampled evenly above this
    jpeg_quality: int = 90

    def __post_init__(self) -> None:
        if self.structured not in STRUCTURED_MODES:
            raise ValueError(f"structured must be one of {STRUCTURED_MODES}; got {self.structured!r}")
        if self.max_in_flight < 1 or self.max_attempts < 1:
            raise ValueError("max_in_flight and max_attempts must be >= 1")

    def resolved_api_key(self) -> str:
        key = self.api_key or os.environ.get("CAPEVAL_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY")
        if key:
            return key
        if self.base_url:
            return "EMPTY"  # local OpenAI-compatible servers (vLLM) accept any key
        raise ValueError("no API key: set api_key in the judge config, CAPEVAL_JUDGE_API_KEY or OPENAI_API_KEY")


@dataclass
class ChatResult:
    text: str | None
    error: str | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    attempts: int = 0


class _PermanentError(Exception):
    """A failure that retrying cannot fix (400-class status other than 408/409/429)."""


def retry_after_s(headers: Any) -> float | None:
    """Seconds the server asks us to wait: `retry-after-ms`, else `Retry-After` (seconds or an HTTP date)."""
    if headers is None:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(value)
            return max(0.0, parsed.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _jpeg_data_url(image: np.ndarray | bytes, quality: int) -> str:
    if isinstance(image, (bytes, bytearray)):
        data = bytes(image)
    else:
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).save(buf, format="JPEG", quality=quality)
        data = buf.getvalue()
    return "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")


def user_content(text: str, image_urls: Sequence[str]) -> str | list[dict]:
    if not image_urls:
        return text
    return [{"type": "text", "text": text}] + [{"type": "image_url", "image_url": {"url": u}} for u in image_urls]


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (it comes with vLLM's server deps): the client's per-request cost is mostly event-loop
    and socket work, and uvloop roughly halves it; the standard loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _ChatRunner:
    """Runs chat-completion calls with bounded concurrency and retries on a private event-loop thread."""

    def __init__(self, config: HTTPConfig):
        self.config = config
        self._api_key = config.resolved_api_key()
        self._loop = _new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="capeval-http", daemon=True)
        self._thread.start()
        self._client = None
        self._sem: asyncio.Semaphore | None = None
        self._rng = random.Random(0x5EED)

    def _ensure_client(self) -> None:
        if self._client is not None:
            return
        import httpx2
        from openai import AsyncOpenAI, DefaultAioHttpClient

        n = self.config.max_in_flight
        limits = httpx2.Limits(max_connections=n, max_keepalive_connections=n)
        self._client = AsyncOpenAI(
            api_key=self._api_key,
            base_url=self.config.base_url,
            max_retries=0,  # ours, below: they honour Retry-After on 503 and retry garbage bodies too
            timeout=self.config.timeout_s,
            http_client=DefaultAioHttpClient(limits=limits, timeout=self.config.timeout_s),
        )
        self._sem = asyncio.Semaphore(n)

    def run(self, calls: Sequence[dict]) -> list[ChatResult]:
        """`calls`: JSON bodies of /chat/completions, plus optional `_unwrap` (a JSON field holding the
        answer). Returns one result per call, in order."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("OpenAI HTTP backend called from its own event-loop thread")
        if self._loop.is_closed():
            raise RuntimeError("OpenAI HTTP backend is closed")

        async def batch():
            self._ensure_client()
            return await asyncio.gather(*(self._call(dict(c)) for c in calls))

        return asyncio.run_coroutine_threadsafe(batch(), self._loop).result()

    def _backoff(self, attempt: int) -> float:
        cap = min(self.config.backoff_max_s, self.config.backoff_base_s * (2**attempt))
        return self._rng.uniform(0.0, cap)  # full jitter: spreads retries of a burst that failed together

    async def _call(self, kwargs: dict) -> ChatResult:
        import openai

        unwrap = kwargs.pop("_unwrap", None)
        cfg = self.config
        last_error = "no attempt made"
        t_start = time.perf_counter()
        for attempt in range(cfg.max_attempts):
            delay: float | None = None
            try:
                async with self._sem:
                    # The SDK's generic `post` (its documented route for raw bodies) keeps its transport, auth and
                    # error mapping but skips the typed-params transform and pydantic construction, which cost
                    # ~4x the whole round trip against a fast local server (benchmarks/http_loopback.py).
                    completion = await self._client.post("/chat/completions", body=kwargs, cast_to=object)
                result = self._result(completion, unwrap)
                result.latency_s = time.perf_counter() - t_start
                result.attempts = attempt + 1
                return result
            except openai.APIStatusError as exc:
                status = exc.status_code
                last_error = f"HTTP {status}: {str(exc)[:300]}"
                if 400 <= status < 500 and status not in RETRYABLE_4XX:
                    return ChatResult(None, last_error, latency_s=time.perf_counter() - t_start, attempts=attempt + 1)
                delay = retry_after_s(getattr(exc.response, "headers", None))
            except openai.APITimeoutError:
                last_error = f"timeout after {cfg.timeout_s:g} s"
            except openai.APIConnectionError as exc:
                last_error = f"connection error: {exc.__cause__ or exc}"[:300]
            except _PermanentError as exc:
                return ChatResult(None, str(exc), latency_s=time.perf_counter() - t_start, attempts=attempt + 1)
            except Exception as exc:  # noqa: BLE001 - invalid JSON, missing fields, unparseable structured output
                last_error = f"bad response body ({type(exc).__name__}): {exc}"[:300]
            if attempt + 1 < cfg.max_attempts:
                wait = min(cfg.backoff_max_s, delay) if delay is not None else self._backoff(attempt)
                await asyncio.sleep(wait)
        return ChatResult(
            None, f"failed after {cfg.max_attempts} attempts: {last_error}",
            latency_s=time.perf_counter() - t_start, attempts=cfg.max_attempts,
        )

    def _result(self, completion: Any, unwrap: str | None) -> ChatResult:
        if not isinstance(completion, dict):
            raise ValueError(f"response body is not a JSON object: {str(completion)[:100]!r}")
        choices = completion.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ValueError("completion without choices")
        text = (choices[0].get("message") or {}).get("content")
        if not isinstance(text, str):
            raise ValueError("completion without text content")
        if unwrap is not None:  # the choice was asked for as {"answer": <enum>} (OpenAI has no plain choice mode)
            text = json.loads(text)[unwrap]
            if not isinstance(text, str):
                raise ValueError(f"structured answer {unwrap!r} is not a string")
        usage = completion.get("usage") or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion_tokens = int(usage.get("completion_tokens") or 0)
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        cfg = self.config
        cached_price = cfg.price_prompt_per_m if cfg.price_cached_per_m is None else cfg.price_cached_per_m
        cost = ((prompt - cached) * cfg.price_prompt_per_m + cached * cached_price
                + completion_tokens * cfg.price_completion_per_m) / 1e6
        return ChatResult(text, None, prompt, cached, completion_tokens, cost_usd=cost)

    def structured_kwargs(self, choices: Sequence[str] | None, json_schema: str | None) -> dict:
        mode = self.config.structured
        if mode == "none" or (not choices and not json_schema):
            return {}
        if mode == "vllm":
            so = {"choice": list(choices)} if choices else {"json": json.loads(json_schema)}
            return {"structured_outputs": so}  # vLLM's request field (sent as extra_body by SDK users)
        if choices:
            schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": list(choices)}},
                      "required": ["answer"], "additionalProperties": False}
            fmt = {"type": "json_schema", "json_schema": {"name": "choice", "schema": schema, "strict": True}}
            return {"response_format": fmt, "_unwrap": "answer"}
        fmt = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": json.loads(json_schema)}}
        return {"response_format": fmt}

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown():
            if self._client is not None:
                await self._client.close()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()


class _HTTPBackend:
    def __init__(self, config: HTTPConfig | None = None, **overrides: Any):
        base = config or HTTPConfig()
        self.config = HTTPConfig(**{**base.__dict__, **overrides})
        self.name = self.config.model
        self.revision = self.config.revision or self.config.model
        self._runner = _ChatRunner(self.config)

    def close(self) -> None:
        self._runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@register_judge("openai")
class OpenAIJudge(_HTTPBackend):
    """Judge over any OpenAI-compatible chat endpoint (OpenAI, vLLM `serve`, SGLang, ...)."""

    def _kwargs(self, r: JudgeRequest) -> dict:
        messages = ([{"role": "system", "content": r.system}] if r.system else []) + [{
            "role": "user",
            "content": user_content(r.user, [_jpeg_data_url(im, self.config.jpeg_quality) for im in r.images]),
        }]
        kwargs = {"model": self.config.model, "messages": messages, "max_tokens": r.max_tokens,
                  "temperature": r.temperature, "seed": r.seed}
        kwargs.update(self._runner.structured_kwargs(r.choices, r.json_schema))
        return kwargs

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        calls, bad = [], {}
        for i, r in enumerate(requests):
            try:
                calls.append(self._kwargs(r))
            except (ValueError, TypeError) as exc:  # e.g. a json_schema that is not JSON: this request only
                bad[i] = f"invalid request: {exc}"
        results = iter(self._runner.run(calls))
        out = []
        for i, r in enumerate(requests):
            if i in bad:
                out.append(JudgeResponse(r.key, None, bad[i]))
                continue
            res = next(results)
            out.append(JudgeResponse(r.key, res.text, res.error, res.prompt_tokens, res.cached_prompt_tokens,
                                     res.completion_tokens, res.latency_s, res.cost_usd))
        return out


@dataclass
class HTTPCaptionResponse(CaptionResponse):
    note: str | None = None  # e.g. which frames were sent when the request had more than max_images


def subsample_indices(n_frames: int, max_images: int) -> np.ndarray:
    """Evenly spaced frame indices (first and last included) when there are more frames than allowed."""
    if n_frames <= max_images:
        return np.arange(n_frames)
    return np.unique(np.linspace(0, n_frames - 1, max_images).round().astype(np.int64))


@register_captioner("openai")
class OpenAICaptioner(_HTTPBackend):
    """Multimodal captioner: frames go as JPEG data URLs in one user message."""

    def _kwargs(self, r: CaptionRequest) -> tuple[dict, str | None]:
        frames = np.asarray(r.frames)
        if frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"frames must be uint8 (T, H, W, 3); got shape {frames.shape}")
        idx = subsample_indices(len(frames), self.config.max_images)
        note = None
        if len(idx) < len(frames):
            note = f"sent {len(idx)} of {len(frames)} frames (evenly subsampled; max_images={self.config.max_images})"
        text = r.prompt if r.context is None else f"{r.context}\n\n{r.prompt}"
        if r.timestamps:
            stamps = ", ".join(f"{r.timestamps[i]:.2f}" for i in idx if i < len(r.timestamps))
            text = f"{text}\n(Frame timestamps in seconds: {stamps})"
        urls = [_jpeg_data_url(frames[i], self.config.jpeg_quality) for i in idx]
        kwargs = {"model": self.config.model, "messages": [{"role": "user", "content": user_content(text, urls)}],
                  "max_tokens": r.max_tokens, "temperature": r.temperature, "seed": r.seed}
        return kwargs, note

    def caption(self, requests: Sequence[CaptionRequest]) -> list[HTTPCaptionResponse]:
        calls, notes, bad = [], [], {}
        for i, r in enumerate(requests):
            try:
                kwargs, note = self._kwargs(r)
                calls.append(kwargs)
                notes.append(note)
            except (ValueError, TypeError, OSError) as exc:
                bad[i] = f"invalid request {r.key}: {exc}"
        results = iter(zip(self._runner.run(calls), notes))
        out = []
        for i, r in enumerate(requests):
            if i in bad:
                out.append(HTTPCaptionResponse(r.key, None, bad[i]))
                continue
            res, note = next(results)
            out.append(HTTPCaptionResponse(r.key, res.text, res.error, res.prompt_tokens, res.completion_tokens,
                                           res.latency_s, note))
        if any(n for n in notes):
            log.info("captioner %s: some requests had frames subsampled to %d", self.name, self.config.max_images)
        return out
