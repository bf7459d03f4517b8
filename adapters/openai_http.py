"""OpenAI-compatible HTTP backends: a judge (`OpenAIJudge`) and a multimodal captioner (`OpenAICaptioner`).

Both build /chat/completions bodies and hand them to `capeval.adapters.http_chat.ChatRunner` (private event-loop thread,
an aiohttp keep-alive connection pool, the openai SDK's retry rules, 401/403 fatal). The judge also streams
(`stream(feed, max_in_flight)`, capeval.adapters.base.StreamingJudge): a bounded window with no batch barrier. Failures are
reported per request; a batch never raises for one request (only BackendFatalError, for the whole run).

Message layout: system (when given), then one user message whose content lists the images first and the text last,
so every request that shows the same frames shares the longest possible prefix. A request with `temperature=None`
sends no temperature (the server's default), as the official scripts that set no sampling parameters do.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import math
import os
import re
from dataclasses import dataclass, fields
from typing import Any, Iterator, Sequence

import numpy as np

from capeval.adapters.base import BackendFatalError, CaptionRequest, CaptionResponse, JudgeRequest, JudgeResponse
from capeval.adapters.http_chat import ChatResult, ChatRunner, Prices, RetryPolicy, Unwrap, encode_body, retry_after_s
from capeval.adapters.http_transport import MAX_BODY_BYTES, check_transport, check_url
from capeval.engine.params import Param
from capeval.engine.reasoning import ReasoningTagsError, parse_tags
from capeval.engine.secrets import redact_url, remember_secret

__all__ = ["HTTPConfig", "OpenAIJudge", "OpenAICaptioner", "retry_after_s", "subsample_indices", "user_content"]

log = logging.getLogger(__name__)

STRUCTURED_MODES = ("openai", "vllm", "none")
# The default window (docs/judges.md "How many requests in flight"): a self-hosted server (vLLM, SGLang) batches what
# it is sent, and vLLM's default batch (max_num_seqs) is 256 sequences on a GPU, so 256 in flight keeps it full; the
# OpenAI API answers each request on its own under per-minute rate limits, where more than 64 mostly buys 429s.
DEFAULT_WINDOW_SERVER = 256
DEFAULT_WINDOW_OPENAI = 64


@dataclass
class HTTPConfig:
    model: str = "gpt-4-turbo"
    base_url: str | None = None  # None: https://api.openai.com/v1
    # Credentials, in this order (resolved_api_key): `api_key` (a value: for local use; `capeval submit` refuses it),
    # else the variable `api_key_env` names (read where the backend runs, e.g. on the cluster), else
    # $CAPEVAL_JUDGE_API_KEY, else $OPENAI_API_KEY, else "EMPTY" for a custom base_url. Neither enters the revision,
    # a cache key or a record (engine/secrets.py: names ending in _env hold a variable's name, not a secret).
    api_key: str | None = None
    api_key_env: str | None = None
    revision: str = ""  # part of every cache key; defaults to the model name
    structured: str = "openai"  # "openai": response_format json_schema; "vllm": structured_outputs; "none"
    # structured="openai" asks for a choice as the JSON object {"answer": "<choice>"}: these tokens are added to the
    # request's max_tokens for the object around the choice (a protocol sizes max_tokens for the bare choice; a
    # server that allows whitespace in JSON, as stock vLLM does, writes '{\n  "answer": "A"\n}')
    choice_json_tokens: int = 32
    max_reply_bytes: int = MAX_BODY_BYTES  # a response body (decompressed) longer than this is not read further
    # requests at the server at once: the judge loop's window and the connection pool's size (a caption actor's
    # window for the captioner); None: DEFAULT_WINDOW_OPENAI for the OpenAI API, DEFAULT_WINDOW_SERVER for a base_url
    max_in_flight: int | None = None
    timeout_s: float = 120.0  # per attempt, from when it has a connection slot (a stalled request holds only its own)
    connect_timeout_s: float = 10.0  # opening a connection
    max_attempts: int = 6
    backoff_base_s: float = 0.5
    backoff_max_s: float = 60.0  # also caps Retry-After
    price_prompt_per_m: float = 0.0  # USD per 1M uncached prompt tokens
    price_cached_per_m: float | None = None  # USD per 1M cached prompt tokens; None: same as uncached
    price_completion_per_m: float = 0.0
    transport: str = "auto"  # "auto" or "aiohttp": both aiohttp (proxies from HTTP(S)_PROXY / NO_PROXY)
    # tail hedging (adapters/http_chat.py ChatRunner): once no more requests are coming, the window's slots that the
    # last requests free carry copies of the longest-outstanding ones, at most this many per request; the first
    # good answer wins, the other copies are cancelled. On by default: the copies only fill slots that would sit
    # idle while the last requests drain, so the server never sees more than max_in_flight and a run sends at most
    # hedge x max_in_flight extra requests per drain. Only requests at temperature 0 are copied (a sampled one's
    # first answer would favour short replies). 0: off (e.g. a paid API that bills cancelled requests)
    hedge: int = 3
    # captioner only
    max_frames: int | None = None  # a backend's limit on images per request; None: every frame of the frame spec
    # caption length sent; None (default): the request's max_tokens, which the caption stage sets per captioner and
    # keys captions by; a value here overrides it (and, being a captioner param, enters the caption key too)
    max_tokens: int | None = None
    jpeg_quality: int = 90
    # thinking models: the tags around the reasoning, stripped from replies before parsing and from captions before
    # judging (engine/reasoning.py); None: ["<think>", "</think>"]; "none": keep everything
    reasoning_tags: list | str | None = None

    def __post_init__(self) -> None:
        check_http_config(self)

    def resolved_base_url(self) -> str:
        redact_url(self.base_url)  # a key inside the URL is remembered: blanked from every record and log line
        return self.base_url or "https://api.openai.com/v1"

    def resolved_max_in_flight(self) -> int:
        if self.max_in_flight is not None:
            return self.max_in_flight
        return DEFAULT_WINDOW_SERVER if self.base_url else DEFAULT_WINDOW_OPENAI

    def resolved_api_key(self) -> str:
        if self.api_key_env and not self.api_key and not os.environ.get(self.api_key_env):
            # named on purpose: falling back to another variable would send a key the user did not choose
            raise HTTPConfigError("api_key_env", f"environment variable {self.api_key_env} is not set here")
        key = (self.api_key or (os.environ.get(self.api_key_env) if self.api_key_env else None)
               or os.environ.get("CAPEVAL_JUDGE_API_KEY") or os.environ.get("OPENAI_API_KEY"))
        if key:
            remember_secret(key)  # blanked from every record and log line this process writes later
            return key
        if self.base_url:
            return "EMPTY"  # local OpenAI-compatible servers (vLLM) accept any key
        raise HTTPConfigError("api_key", "no API key: set api_key_env (the name of an environment variable), "
                                         "CAPEVAL_JUDGE_API_KEY or OPENAI_API_KEY")


class HTTPConfigError(ValueError):
    """A value of the OpenAI-compatible backend's config that cannot work; `field` names it (so does the message)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def _number(cfg: HTTPConfig, name: str, *, positive: bool, optional: bool = False, integer: bool = False) -> None:
    value = getattr(cfg, name)
    if value is None and optional:
        return
    kinds = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        wanted = "an integer" if integer else "a finite number"
        raise HTTPConfigError(name, f"expected {wanted}{' or None' if optional else ''}, got {value!r}")
    if (value <= 0) if positive else (value < 0):
        raise HTTPConfigError(name, f"must be {'> 0' if positive else '>= 0'}, got {value!r}")


def check_http_config(cfg: HTTPConfig) -> None:
    """HTTPConfigError (a ValueError naming the field) for a value that cannot work, before anything is sent: a
    timeout that is not a positive number (-1 would make every attempt fail, retryably, forever), no attempts, a URL
    that is not http(s), an unknown structured mode or transport, an empty model name."""
    if not isinstance(cfg.model, str) or not cfg.model.strip():
        raise HTTPConfigError("model", f"expected a model name, got {cfg.model!r}")
    try:
        parse_tags(cfg.reasoning_tags)
    except ReasoningTagsError as exc:
        raise HTTPConfigError("reasoning_tags", str(exc).split(": ", 1)[1]) from None
    if cfg.base_url is not None:
        if not isinstance(cfg.base_url, str):
            raise HTTPConfigError("base_url", f"expected an http:// or https:// URL, got {cfg.base_url!r}")
        try:
            check_url(cfg.base_url)
        except ValueError as exc:
            raise HTTPConfigError("base_url", str(exc).removeprefix("base_url ")) from None
    if cfg.api_key_env is not None and not (isinstance(cfg.api_key_env, str)
                                            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", cfg.api_key_env)):
        # the value is not echoed: it may be the key itself, written where its variable's name belongs
        raise HTTPConfigError("api_key_env", "expected the name of an environment variable (letters, digits, '_')")
    if cfg.structured not in STRUCTURED_MODES:
        raise HTTPConfigError("structured", f"must be one of {STRUCTURED_MODES}; got {cfg.structured!r}")
    try:
        check_transport(cfg.transport)
    except ValueError as exc:
        raise HTTPConfigError("transport", str(exc)) from None
    for name in ("timeout_s", "connect_timeout_s"):
        _number(cfg, name, positive=True)
    _number(cfg, "max_attempts", positive=True, integer=True)
    _number(cfg, "max_in_flight", positive=True, integer=True, optional=True)
    _number(cfg, "max_reply_bytes", positive=True, integer=True)
    _number(cfg, "choice_json_tokens", positive=False, integer=True)
    _number(cfg, "hedge", positive=False, integer=True)
    for name in ("backoff_base_s", "backoff_max_s", "price_prompt_per_m", "price_completion_per_m"):
        _number(cfg, name, positive=False)
    _number(cfg, "price_cached_per_m", positive=False, optional=True)
    for name in ("max_frames", "max_tokens"):
        _number(cfg, name, positive=True, optional=True, integer=True)
    if isinstance(cfg.jpeg_quality, bool) or not isinstance(cfg.jpeg_quality, int) or not 1 <= cfg.jpeg_quality <= 100:
        raise HTTPConfigError("jpeg_quality", f"expected an integer 1..100, got {cfg.jpeg_quality!r}")


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
    """Images first, then the text (shared-prefix order: the frames are the same for every question about them)."""
    if not image_urls:
        return text
    return [{"type": "image_url", "image_url": {"url": u}} for u in image_urls] + [{"type": "text", "text": text}]


def structured_fields(mode: str, choices: Sequence[str] | None, json_schema: str | None) -> tuple[dict, str | None]:
    """Body fields asking for structured output, and the JSON field to unwrap from the answer (or None)."""
    if mode == "none" or (not choices and not json_schema):
        return {}, None
    if mode == "vllm":
        so = {"choice": list(choices)} if choices else {"json": json.loads(json_schema)}
        return {"structured_outputs": so}, None  # vLLM's request field (what SDK users send as extra_body)
    if choices:
        schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": list(choices)}},
                  "required": ["answer"], "additionalProperties": False}
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "choice", "schema": schema, "strict": True}}}, "answer"
    fmt = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": json.loads(json_schema)}}
    return {"response_format": fmt}, None


class _HTTPBackend:
    # its params are the fields of its config (names, types and defaults as HTTPConfig declares them; the config's
    # own checks run at --check too: capeval.engine.sweep.validation)
    params: tuple[Param, ...] = ()
    config_class = HTTPConfig

    def __init__(self, config: HTTPConfig | None = None, **overrides: Any):
        base = config or HTTPConfig()
        known = {f.name for f in fields(HTTPConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown option(s) {unknown}; valid: {sorted(known)}")
        self.config = HTTPConfig(**{**base.__dict__, **overrides})
        self.name = self.config.model
        self.revision = self.config.revision or self.config.model
        cfg = self.config
        self._runner = ChatRunner(
            cfg.resolved_base_url(), cfg.resolved_api_key(), max_in_flight=cfg.resolved_max_in_flight(), transport=cfg.transport,
            retry=RetryPolicy(cfg.timeout_s, cfg.max_attempts, cfg.backoff_base_s, cfg.backoff_max_s,
                              connect_timeout_s=cfg.connect_timeout_s),
            prices=Prices(cfg.price_prompt_per_m, cfg.price_cached_per_m, cfg.price_completion_per_m),
            max_reply_bytes=cfg.max_reply_bytes, max_hedges=cfg.hedge)

    @property
    def max_in_flight(self) -> int:
        """Requests at the server at once (the connection pool): the judge loop's window (capeval.adapters.base.Judge), the
        caption stage's window per actor (capeval.adapters.base.StreamingCaptioner)."""
        return self.config.resolved_max_in_flight()

    def no_more_requests(self) -> None:
        """The caller will send nothing more for now (the caption stage's last tasks are out): the window's free
        slots may carry hedge copies of the requests still running (the `hedge` option; adapters/http_chat.py)."""
        self._runner.hedge_idle_slots()

    @property
    def hedged_requests(self) -> int:
        """Hedge copies sent so far (each is one more request at the server; its tokens are not reported)."""
        return self._runner.hedged_requests

    @property
    def hedges_won(self) -> int:
        """Requests whose answer came from a hedge copy."""
        return self._runner.hedges_won

    def watch_retries(self, callback) -> None:
        """`callback(kind)` is called at each retry, as it happens, on the client's thread (adapters/http_chat.py
        `ChatRunner.on_retry`): the judge loop counts retries and rate limits on its progress line."""
        self._runner.on_retry = callback

    def _raise_if_fatal(self, results: Sequence[ChatResult]) -> None:
        if any(r.fatal for r in results):
            raise BackendFatalError(self._runner.fatal_error or next(r.error for r in results if r.fatal))

    def close(self) -> None:
        self._runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _judge_response(key: str, res: ChatResult) -> JudgeResponse:
    return JudgeResponse(key, res.text, res.error, res.prompt_tokens, res.cached_prompt_tokens,
                         res.completion_tokens, res.latency_s, res.cost_usd, reasoning_tokens=res.reasoning_tokens,
                         raw_replies=res.raw_replies)


class OpenAIJudge(_HTTPBackend):
    """Judge over any OpenAI-compatible chat endpoint (OpenAI, vLLM `serve`, SGLang, ...)."""

    thread_safe = True  # judge() may be called from several threads at once (one shared runner)

    def body(self, r: JudgeRequest) -> tuple[bytes, Unwrap | None]:
        """The encoded /chat/completions body for `r` and how to read its structured answer (ValueError if
        invalid). A choice asked for as a JSON object gets `choice_json_tokens` more tokens for the object."""
        content = user_content(r.user, [_jpeg_data_url(im, self.config.jpeg_quality) for im in r.images])
        messages = ([{"role": "system", "content": r.system}] if r.system else []) + [
            {"role": "user", "content": content}]
        extra, field = structured_fields(self.config.structured, r.choices, r.json_schema)
        max_tokens = self.sent_max_tokens(r.max_tokens, r.choices, r.json_schema)
        body = {"model": self.config.model, "messages": messages}
        # a sampling parameter the request leaves unset (None) is not sent: the official scripts send none
        for name, value in (("max_tokens", max_tokens), ("seed", r.seed), ("temperature", r.temperature)):
            if value is not None:
                body[name] = value
        body.update(extra)
        unwrap = None
        if field:
            unwrap = Unwrap(field, max_tokens, f"the judge option choice_json_tokens (now "
                                               f"{self.config.choice_json_tokens}) adds tokens for the JSON object "
                                               "around the choice; structured=vllm asks a vLLM server for the bare "
                                               "choice")
        return encode_body(body), unwrap

    def sent_max_tokens(self, max_tokens: int | None, choices, json_schema) -> int | None:
        """The max_tokens a request with the protocol's `max_tokens` goes out with (transcripts show this one);
        None: none sent."""
        if max_tokens is None:
            return None
        _, field = structured_fields(self.config.structured, choices, json_schema)
        return int(max_tokens) + self.config.choice_json_tokens if field else int(max_tokens)

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        calls, bad = [], {}
        for i, r in enumerate(requests):
            try:
                calls.append(self.body(r))
            except (ValueError, TypeError) as exc:  # e.g. a json_schema that is not JSON: this request only
                bad[i] = f"invalid request: {exc}"
        results = self._runner.run(calls)
        self._raise_if_fatal(results)
        it = iter(results)
        return [JudgeResponse(r.key, None, bad[i]) if i in bad else _judge_response(r.key, next(it))
                for i, r in enumerate(requests)]

    def stream(self, feed, max_in_flight: int | None = None) -> Iterator[JudgeResponse]:
        """capeval.adapters.base.StreamingJudge: at most `max_in_flight` requests outstanding (default: the config's, the
        connection pool's size; more than that is a ValueError: the pool cannot hold them), responses in completion
        order. Raises BackendFatalError (after the requests in flight) on HTTP 401/403."""
        limit = int(max_in_flight or self.max_in_flight)
        if limit > self.max_in_flight:
            raise ValueError(f"{limit} requests in flight asked of judge {self.name}, whose max_in_flight (its "
                             f"connection pool) is {self.max_in_flight}: raise its max_in_flight option")
        for request, result in self._runner.stream(feed, limit, self.body):
            yield _judge_response(request.key, result)


@dataclass
class HTTPCaptionResponse(CaptionResponse):
    note: str | None = None  # e.g. which frames were sent when the request had more than max_frames


def subsample_indices(n_frames: int, max_frames: int | None) -> np.ndarray:
    """Evenly spaced frame indices (first and last included) when there are more frames than allowed."""
    if max_frames is None or n_frames <= max_frames:
        return np.arange(n_frames)
    return np.unique(np.linspace(0, n_frames - 1, max_frames).round().astype(np.int64))


class _FutureSink:
    """A ChatRunner result sink (it only needs `put`) that resolves a future on another thread's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future):
        self.loop, self.future = loop, future

    def put(self, item: tuple) -> None:
        self.loop.call_soon_threadsafe(_resolve, self.future, item[1])


def _resolve(future: asyncio.Future, result: ChatResult) -> None:
    if not future.done():  # cancelled meanwhile: nobody waits for it
        future.set_result(result)


def _caption_response(key: str, res: ChatResult, n_sent: int, note: str | None,
                      processor: dict | None = None) -> "HTTPCaptionResponse":
    return HTTPCaptionResponse(key, res.text, res.error, res.prompt_tokens, res.completion_tokens, res.latency_s,
                               truncated=res.finish_reason == "length", frames_sent=n_sent, note=note,
                               reasoning_tokens=getattr(res, "reasoning_tokens", None), processor_inputs=processor)


class OpenAICaptioner(_HTTPBackend):
    """Multimodal captioner: the frames of the frame spec go as JPEG data URLs in one user message, all of them
    unless `max_frames` (the backend's limit) says otherwise; then they are evenly subsampled and the number sent is
    recorded (`frames_sent`, `note`). An image item (`media_type="image"`) is sent as one image. A caption cut at
    `max_tokens` (finish_reason "length") has `truncated=True`. The prompt's system message, when it has one, goes
    first. A question (a construction pipeline's question step: `CaptionRequest.question` set) goes exactly like a
    caption request: its `prompt` is the whole question with its options, the frames go before it, and the reply is the answer; the
    question's fields are not sent."""

    actor_cpus = 0  # a caption actor waits on the server: it reserves no core (capeval.engine.stages.caption.actor_cpus)

    @property
    def queue_ahead(self) -> int:
        """Requests the caption stage may hand over beyond the window (capeval.adapters.base.CaptionerCapabilities):
        their bodies wait, built, for a free connection slot (ChatRunner's pool, first come first served, untimed),
        so a slot that frees is refilled at once, not after the stage's round trip. A quarter of the window (at
        least 4): enough to cover that round trip's hiccups, few enough frames held."""
        return max(4, self.max_in_flight // 4)

    def _sent(self, r: CaptionRequest) -> np.ndarray:
        """Positions in `r.frames` of the frames the request carries."""
        image = getattr(r, "media_type", "video") == "image"
        return np.arange(1) if image else subsample_indices(len(r.frames), self.config.max_frames)

    def processor_inputs(self, r: CaptionRequest) -> dict:
        """The frames-seen ledger's report (capeval.adapters.base.CaptionResponse.processor_inputs): how the frames
        went and which; the server's own resize and visual tokens are not reported by the API."""
        idx = self._sent(r)
        stored = r.encoded_frames is not None and len(r.encoded_frames) == len(r.frames)
        report = {"backend": "openai-http",
                  "sent_as": "jpeg image_url" + (" (frame cache bytes)" if stored
                                                 else f" (quality {self.config.jpeg_quality})")}
        if len(idx) < len(r.frames):
            report["frames_sent"] = [int(i) for i in idx]
        return report

    def _body(self, r: CaptionRequest) -> tuple[bytes, int, str | None]:
        frames = np.asarray(r.frames)
        if frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"frames must be uint8 (T, H, W, 3); got shape {frames.shape}")
        image = getattr(r, "media_type", "video") == "image"
        idx = self._sent(r)  # a still image is one picture, sent once, without frame timestamps
        note = None
        if not image and len(idx) < len(frames):
            note = f"sent {len(idx)} of {len(frames)} frames (evenly subsampled; max_frames={self.config.max_frames})"
        # the prompt as the stage gives it, byte for byte (frame times are in it only when the captioner's
        # `timestamps = "text"` asked the stage to put them there)
        text = r.prompt if r.context is None else f"{r.context}\n\n{r.prompt}"
        # frames the frame cache already holds as JPEG go as they are (no decode-encode round per request)
        encoded = r.encoded_frames if r.encoded_frames is not None and len(r.encoded_frames) == len(frames) else None
        urls = [_jpeg_data_url(encoded[i] if encoded else frames[i], self.config.jpeg_quality) for i in idx]
        system = getattr(r, "system", None)
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user_content(text, urls)}]
        body = {"model": self.config.model, "messages": messages,
                "max_tokens": self.config.max_tokens or r.max_tokens, "seed": r.seed}
        if r.temperature is not None:
            body["temperature"] = r.temperature
        return encode_body(body), len(idx), note

    async def acaption(self, request: CaptionRequest) -> HTTPCaptionResponse:
        """capeval.adapters.base.StreamingCaptioner: one request on the shared ChatRunner (its retries, timeouts and 401/403
        rule), awaited from the caller's event loop (the caption actor's). Failures come back as the response's
        `error`; a 401/403 too (every later request then fails at once with it, unsent)."""
        try:
            if request.encoded_frames is not None:
                body, n_sent, note = self._body(request)
            else:  # JPEG encoding is CPU work: off the event loop, which is busy with other requests' replies
                body, n_sent, note = await asyncio.to_thread(self._body, request)
        except (ValueError, TypeError, OSError) as exc:
            return HTTPCaptionResponse(request.key, None, f"invalid request {request.key}: {exc}")
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        token, sink = object(), _FutureSink(loop, done)  # they identify this call for ChatRunner.cancel
        self._runner.submit([(token, body, None)], sink)
        try:
            res = await done
        except asyncio.CancelledError:
            self._runner.cancel({token}, sink)
            raise
        return _caption_response(request.key, res, n_sent, note, self.processor_inputs(request))

    def caption(self, requests: Sequence[CaptionRequest]) -> list[HTTPCaptionResponse]:
        calls, sent, bad = [], [], {}
        for i, r in enumerate(requests):
            try:
                body, n_sent, note = self._body(r)
                calls.append((body, None))
                sent.append((n_sent, note))
            except (ValueError, TypeError, OSError) as exc:
                bad[i] = f"invalid request {r.key}: {exc}"
        results = self._runner.run(calls)
        self._raise_if_fatal(results)
        it = iter(zip(results, sent))
        out = []
        for i, r in enumerate(requests):
            if i in bad:
                out.append(HTTPCaptionResponse(r.key, None, bad[i]))
                continue
            res, (n_sent, note) = next(it)
            out.append(_caption_response(r.key, res, n_sent, note, self.processor_inputs(r)))
        if any(note for _, note in sent):
            log.info("captioner %s: frames subsampled to max_frames=%d in some requests", self.name,
                     self.config.max_frames)
        return out
