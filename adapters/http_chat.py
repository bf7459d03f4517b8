"""Chat-completion calls for the OpenAI-compatible backends: retries, error meaning, usage, a bounded stream.

`ChatRunner` owns a private event-loop thread (uvloop when installed) and one aiohttp connection pool
(adapters/http_transport.py), so the sync `judge()` / `caption()` / `stream()` work from any thread and reuse
connections across calls. The retry rules are the `openai` package's (`_base_client._should_retry`): retry 408, 409,
429 and 5xx, timeouts and connection errors, obey `x-should-retry`, honour `retry-after-ms` / `Retry-After`; the
backoff is exponential with full jitter (the SDK keeps 75-100% of the step; full jitter spreads a burst that failed
together better). Garbage bodies (invalid JSON, no choices) are retried too: they are what a proxy or an overloaded
server returns. Error texts carry the SDK's class names (RateLimitError, APITimeoutError, ...). Not retried, because
the same request would get the same answer: a structured answer cut at `max_tokens` (TruncatedReply: the error names
finish_reason=length, the limit and the option that raises it) and a body over the size cap (ReplyTooLarge). A
failed result keeps the raw reply of each attempt that got a 2xx body (`raw_replies`), for `capeval show --failed`.
An HTTP 404 names the URL and, when its path has no /v1, says that OpenAI-compatible servers serve under /v1.

Each retry is told as it happens to `on_retry(kind)` when set (kind: "429", "5xx", "timeout", "connection", "bad body"
or the status), on the runner's thread: the judge loop's progress line counts them (engine/judging/live.py).

HTTP 401/403 is fatal for the whole run: the first request of a runner goes alone and the others wait for its first
answer, but at most `connect_timeout_s` (a server refuses a key at once; a longer wait means it is generating, so a
stalled first request holds nobody); once a 401/403 came back nothing more is sent; callers raise
`capeval.adapters.base.BackendFatalError`. A stalled request holds only its own slot: each attempt has its own timeout, and
waiting for a connection slot is not counted in it (adapters/http_transport.py).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import queue
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from capeval.adapters.base import BackendFatalError
from capeval.adapters.http_transport import (MAX_BODY_BYTES, ReplyTooLarge, TransportError, TransportTimeout, check_transport,
                                     check_url, make_transport)
from capeval.engine.reasoning import wrap_reasoning

# The openai package's exception class for each status (openai._client._make_status_error), for error texts.
STATUS_ERRORS = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
                 404: "NotFoundError", 409: "ConflictError", 422: "UnprocessableEntityError", 429: "RateLimitError"}
FATAL_STATUSES = (401, 403)

try:  # msgspec (a vLLM dependency) encodes/decodes ~3x faster than json; bodies are plain JSON either way
    import msgspec

    _encode, decode_body = msgspec.json.encode, msgspec.json.decode
except ImportError:  # pragma: no cover - depends on the environment
    msgspec = None

    def _encode(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False).encode()

    decode_body = json.loads


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
    finish_reason: str | None = None
    fatal: bool = False  # 401/403: the caller stops the run
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens, when the server says
    # a failed call: the raw reply of each attempt whose 2xx body was refused (its message content when it had one,
    # else the body's start), oldest first
    raw_replies: tuple[str, ...] = ()


class TruncatedReply(ValueError):
    """A structured answer cut at max_tokens (finish_reason "length") before it was complete: asking the same
    request again gets the same cut reply, so it is not retried."""

    def __init__(self, message: str, content: str):
        super().__init__(message)
        self.content = content


#: what a reply kept for `capeval show` may hold of one attempt
RAW_REPLY_CHARS = 4000


@dataclass(frozen=True)
class Prices:
    prompt_per_m: float = 0.0  # USD per 1M uncached prompt tokens
    cached_per_m: float | None = None  # None: same as uncached
    completion_per_m: float = 0.0

    def cost(self, prompt: int, cached: int, completion: int) -> float:
        cached_price = self.prompt_per_m if self.cached_per_m is None else self.cached_per_m
        return ((prompt - cached) * self.prompt_per_m + cached * cached_price
                + completion * self.completion_per_m) / 1e6


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


def should_retry(status: int, headers: dict[str, str]) -> bool:
    """The openai SDK's rule: the server's `x-should-retry` wins; else 408, 409, 429 and 5xx are retried."""
    hint = headers.get("x-should-retry")
    if hint in ("true", "false"):
        return hint == "true"
    return status in (408, 409, 429) or status >= 500


def error_name(status: int) -> str:
    return STATUS_ERRORS.get(status, "InternalServerError" if status >= 500 else "APIStatusError")


def _server_message(payload: bytes) -> str:
    try:
        body = decode_body(payload)
        err = body.get("error") if isinstance(body, dict) else None
        message = err.get("message") if isinstance(err, dict) else (err or body.get("message"))
        return str(message)[:300] if message else payload[:300].decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - an HTML error page or garbage: show its start
        return payload[:300].decode("utf-8", "replace")


def unwrap_answer(text: str, field: str, finish_reason, max_tokens: int | None, option: str | None) -> str:
    """The answer inside a structured reply `{"<field>": "<answer>"}`; the text itself when it is not such an object
    (a server that ignores response_format answers plainly: the protocol's own parser reads the text). A reply cut at
    max_tokens before the object was complete raises TruncatedReply."""
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and isinstance(obj.get(field), str):
        return obj[field]
    if finish_reason == "length":
        limit = f"max_tokens={max_tokens}" if max_tokens is not None else "the server's token limit"
        raise TruncatedReply(f"reply truncated (finish_reason=length) at {limit} before its structured answer was "
                             f"complete: {text[:80]!r}" + (f"; {option}" if option else ""), text)
    return text


def parse_completion(payload: bytes, unwrap, prices: Prices) -> ChatResult:
    """A /chat/completions body -> ChatResult; ValueError/KeyError/TypeError on a malformed body, TruncatedReply for
    a structured answer cut at max_tokens. `unwrap`: None, the JSON field holding a structured answer, or an
    `Unwrap` (the field, the max_tokens sent and the option that raises it, for the truncation message)."""
    completion = decode_body(payload)
    if not isinstance(completion, dict):
        raise ValueError(f"response body is not a JSON object: {payload[:100]!r}")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError("completion without choices")
    choice = choices[0]
    message = choice.get("message") or {}
    text = message.get("content")
    # Servers with a reasoning parser (vLLM --reasoning-parser, SGLang, DeepSeek) return a thinking model's
    # reasoning apart, in `reasoning_content` (newer vLLM: `reasoning`); content may then be null while it thinks.
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    reasoning = reasoning if isinstance(reasoning, str) and reasoning else None
    # content null with reasoning: cut off while thinking; the reply is then an unclosed reasoning block, which
    # engine/reasoning.py reports as "never closed" (no answer) instead of a retried malformed body
    if not isinstance(text, str) and not (text is None and reasoning is not None and unwrap is None):
        raise ValueError("completion without text content")
    if unwrap is not None:  # the choice was asked for as {"answer": <enum>} (OpenAI has no plain choice mode)
        spec = unwrap if isinstance(unwrap, Unwrap) else Unwrap(unwrap)
        text = unwrap_answer(text, spec.field, choice.get("finish_reason"), spec.max_tokens, spec.option)
    usage = completion.get("usage") or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion_tokens = int(usage.get("completion_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    details = usage.get("completion_tokens_details")
    n_reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if isinstance(n_reasoning, bool) or not isinstance(n_reasoning, (int, float)) or not 0 <= n_reasoning < 2**31:
        n_reasoning = None  # absent, or not a count (NaN, infinite, negative): never fails a good reply
    else:
        n_reasoning = int(n_reasoning)
    # The raw reply keeps the reasoning (the cache and the rows store it): put back in front, between <think> tags,
    # as the model wrote it before the server's parser split it off.
    text = wrap_reasoning(reasoning, text)
    return ChatResult(text, None, prompt, cached, completion_tokens,
                      cost_usd=prices.cost(prompt, cached, completion_tokens), finish_reason=choice.get("finish_reason"),
                      reasoning_tokens=n_reasoning)


@dataclass(frozen=True)
class Unwrap:
    """How to read a structured answer: its JSON field, and for a truncation message the max_tokens sent and the
    option that raises it."""
    field: str
    max_tokens: int | None = None
    option: str | None = None


def raw_reply(payload: bytes) -> str:
    """What a refused 2xx body said, for the transcript: the message content when the body has one, else its start."""
    try:
        content = decode_body(payload)["choices"][0]["message"]["content"]
        if isinstance(content, str):
            return content[:RAW_REPLY_CHARS]
    except Exception:  # noqa: BLE001 - not a completion: its bytes are what there is to show
        pass
    return payload[:RAW_REPLY_CHARS].decode("utf-8", "replace")


def not_found_hint(url: str) -> str:
    """For an HTTP 404: OpenAI-compatible servers (OpenAI, vLLM, SGLang) serve under /v1, which a base URL that
    lacks it misses."""
    import urllib.parse

    path = urllib.parse.urlsplit(url).path
    if "/v1" in path.split("/chat/completions")[0]:
        return "; check the model name and that the server offers /chat/completions"
    return "; the base URL has no /v1: OpenAI-compatible servers answer under it (e.g. http://HOST:8000/v1)"


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # ~20% less client CPU per request than the standard loop (docs/bench.md)
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


@dataclass(frozen=True)
class RetryPolicy:
    timeout_s: float = 120.0  # per attempt, from when it has a connection slot
    max_attempts: int = 6
    backoff_base_s: float = 0.5
    backoff_max_s: float = 60.0  # also caps Retry-After
    connect_timeout_s: float = 10.0  # opening a connection; also the longest wait for the first request's answer


class ChatRunner:
    """Runs chat-completion calls (JSON bodies, already encoded) on a private event-loop thread."""

    def __init__(self, base_url: str, api_key: str, *, max_in_flight: int, retry: RetryPolicy, prices: Prices,
                 transport: str = "auto", max_reply_bytes: int = MAX_BODY_BYTES):
        check_url(base_url)  # here, not on the loop thread where the pool is made: a bad URL must not hang a call
        check_transport(transport)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_in_flight = int(max_in_flight)
        self.retry, self.prices, self.transport_kind = retry, prices, transport
        self.max_reply_bytes = int(max_reply_bytes)
        self.headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "capeval",
                        "Authorization": f"Bearer {api_key}"}
        for env, header in (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project")):
            if os.environ.get(env) and "api.openai.com" in self.url:
                self.headers[header] = os.environ[env]
        self._rng = random.Random(0x5EED)
        self._transport = None
        self._tasks: set[asyncio.Task] = set()
        self._auth_known: asyncio.Event | None = None
        self._probing = False
        self.fatal_error: str | None = None  # set once a 401/403 came back
        self.on_retry: Callable[[str], None] | None = None  # told of each retry as it happens (module docstring)
        self._loop = _new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="capeval-http", daemon=True)
        self._thread.start()

    # ---- submission (any thread) -------------------------------------------------------------------------------
    def submit(self, calls: Sequence[tuple[object, bytes, str | None]], sink: queue.SimpleQueue) -> None:
        """Start `calls` = [(token, body, unwrap)]; each finished call puts (token, ChatResult) into `sink`."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("OpenAI HTTP backend called from its own event-loop thread")
        if self._loop.is_closed():
            raise RuntimeError("OpenAI HTTP backend is closed")
        self._loop.call_soon_threadsafe(self._spawn, list(calls), sink)

    def cancel(self, tokens: set) -> None:
        """Cancel the calls with these tokens that are still running (a stream abandoned by its consumer)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._cancel, set(tokens))

    def run(self, calls: Sequence[tuple[bytes, str | None]]) -> list[ChatResult]:
        """Send every (body, unwrap) and return one result per call, in order."""
        sink: queue.SimpleQueue = queue.SimpleQueue()
        self.submit([(i, body, unwrap) for i, (body, unwrap) in enumerate(calls)], sink)
        out: list[ChatResult | None] = [None] * len(calls)
        for _ in range(len(calls)):
            token, result = self.wait(sink)
            out[token] = result
        return out  # type: ignore[return-value]

    def wait(self, sink: queue.SimpleQueue) -> tuple[object, ChatResult]:
        while True:
            try:
                return sink.get(timeout=1.0)
            except queue.Empty:
                if self._loop.is_closed() or not self._thread.is_alive():
                    raise RuntimeError("OpenAI HTTP backend closed while requests were in flight") from None

    def stream(self, feed, max_in_flight: int, encode: Callable[[Any], tuple[bytes, str | None]]
               ) -> Iterator[tuple[Any, ChatResult]]:
        """Bounded window over `feed` (capeval.adapters.base.RequestFeed): pulls `feed.take(room)` whenever fewer than
        `max_in_flight` calls are outstanding, yields (request, result) in completion order. `encode(request)` ->
        (body, unwrap); a ValueError/TypeError from it is yielded at once as that request's error."""
        limit = max(1, int(max_in_flight))
        sink: queue.SimpleQueue = queue.SimpleQueue()
        in_flight: dict[int, Any] = {}
        next_token, idle_sleep = 0, 0.0005
        try:
            while True:
                closed = feed.closed
                taken = feed.take(limit - len(in_flight)) if len(in_flight) < limit and not self.fatal_error else []
                calls, rejected = [], []
                for request in taken:
                    try:
                        body, unwrap = encode(request)
                    except (ValueError, TypeError) as exc:
                        rejected.append((request, ChatResult(None, f"invalid request: {exc}")))
                        continue
                    in_flight[next_token] = request
                    calls.append((next_token, body, unwrap))
                    next_token += 1
                if calls:
                    self.submit(calls, sink)
                yield from rejected
                if not in_flight:
                    if taken:
                        continue
                    if self.fatal_error:  # after the requests that were in flight came back
                        raise BackendFatalError(self.fatal_error)
                    if closed:
                        return
                    time.sleep(idle_sleep)  # the feed is open but has nothing ready: poll gently
                    idle_sleep = min(0.05, idle_sleep * 2)
                    continue
                idle_sleep = 0.0005
                done = [self.wait(sink)]
                while True:
                    try:
                        done.append(sink.get_nowait())
                    except queue.Empty:
                        break
                for token, result in done:
                    yield in_flight.pop(token), result
        finally:
            if in_flight:
                self.cancel(set(in_flight))

    # ---- on the loop thread ------------------------------------------------------------------------------------
    def _spawn(self, calls: list, sink: queue.SimpleQueue) -> None:
        if self._transport is None:
            self._transport = make_transport(self.url, self.max_in_flight, self.headers, self.transport_kind,
                                             self.retry.connect_timeout_s, self.max_reply_bytes)
            self._auth_known = asyncio.Event()
        for token, body, unwrap in calls:
            task = self._loop.create_task(self._one(token, body, unwrap, sink))
            task.capeval_token = token  # type: ignore[attr-defined]
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _cancel(self, tokens: set) -> None:
        for task in list(self._tasks):
            if getattr(task, "capeval_token", None) in tokens:
                task.cancel()

    async def _one(self, token, body: bytes, unwrap: str | None, sink: queue.SimpleQueue) -> None:
        try:
            result = await self._call(body, unwrap)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - never lose a result slot: the caller waits for every token
            result = ChatResult(None, f"client error ({type(exc).__name__}): {exc}"[:300])
        sink.put((token, result))

    async def _call(self, body: bytes, unwrap: str | None) -> ChatResult:
        if not self._auth_known.is_set():
            if self._probing:  # another request is the probe: wait for its first answer, but not for a stalled one
                try:
                    await asyncio.wait_for(self._auth_known.wait(), self.retry.connect_timeout_s)
                except asyncio.TimeoutError:
                    pass
            else:
                self._probing = True
        if self.fatal_error:
            return ChatResult(None, f"not sent: {self.fatal_error}", fatal=True)
        try:
            return await self._attempts(body, unwrap)
        finally:
            self._auth_known.set()  # a probe that got no HTTP answer at all lets the others try for themselves

    def _backoff(self, attempt: int) -> float:
        cap = min(self.retry.backoff_max_s, self.retry.backoff_base_s * (2**attempt))
        return self._rng.uniform(0.0, cap)  # full jitter

    async def _attempts(self, body: bytes, unwrap: str | None) -> ChatResult:
        policy = self.retry
        last_error = "no attempt made"
        raw: list[str] = []  # each refused 2xx body's reply
        t_start = time.perf_counter()
        for attempt in range(policy.max_attempts):
            delay: float | None = None
            try:
                status, headers, payload = await self._transport.post(body, policy.timeout_s)
            except ReplyTooLarge as exc:  # the same request gets the same huge reply: not retried
                self._auth_known.set()
                return ChatResult(None, str(exc), latency_s=time.perf_counter() - t_start, attempts=attempt + 1,
                                  raw_replies=tuple(raw))
            except TransportTimeout as exc:
                last_error, kind = f"APITimeoutError: {exc}", "timeout"
            except TransportError as exc:
                last_error, kind = f"APIConnectionError: {exc}"[:300], "connection"
            else:
                if status in FATAL_STATUSES:
                    self.fatal_error = (f"HTTP {status} {error_name(status)} from {self.url}: "
                                        f"{_server_message(payload)} (check the API key and its access to the model)")
                    self._auth_known.set()
                    return ChatResult(None, self.fatal_error, attempts=attempt + 1, fatal=True,
                                      latency_s=time.perf_counter() - t_start)
                self._auth_known.set()
                if 200 <= status < 300:
                    try:
                        result = parse_completion(payload, unwrap, self.prices)
                        result.latency_s = time.perf_counter() - t_start
                        result.attempts = attempt + 1
                        return result
                    except TruncatedReply as exc:  # deterministic: asking again gets the same cut reply
                        return ChatResult(None, str(exc)[:500], latency_s=time.perf_counter() - t_start,
                                          attempts=attempt + 1, finish_reason="length",
                                          raw_replies=(*raw, exc.content[:RAW_REPLY_CHARS]))
                    except Exception as exc:  # noqa: BLE001 - invalid JSON, missing fields, bad structured output
                        last_error, kind = f"bad response body ({type(exc).__name__}): {exc}"[:300], "bad body"
                        raw.append(raw_reply(payload))
                else:
                    last_error = f"HTTP {status} {error_name(status)}: {_server_message(payload)}"
                    if status == 404:
                        last_error = (f"HTTP 404 {error_name(404)} from {self.url}: {_server_message(payload)}"
                                      f"{not_found_hint(self.url)}")
                    kind = "5xx" if status >= 500 else str(status)
                    if not should_retry(status, headers):
                        return ChatResult(None, last_error, latency_s=time.perf_counter() - t_start,
                                          attempts=attempt + 1, raw_replies=tuple(raw))
                    delay = retry_after_s(headers)
            self._auth_known.set()  # answered or not, the probe's first attempt is over: the others go
            if attempt + 1 < policy.max_attempts:
                self._report_retry(kind)
                wait = min(policy.backoff_max_s, delay) if delay is not None else self._backoff(attempt)
                await asyncio.sleep(wait)
        return ChatResult(None, f"failed after {policy.max_attempts} attempts: {last_error}",
                          latency_s=time.perf_counter() - t_start, attempts=policy.max_attempts, raw_replies=tuple(raw))

    def _report_retry(self, kind: str) -> None:
        if self.on_retry is not None:
            try:
                self.on_retry(kind)
            except Exception:  # noqa: BLE001 - a display callback never fails a request
                pass

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown():
            for task in list(self._tasks):
                task.cancel()
            if self._transport is not None:
                await self._transport.close()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()


def encode_body(body: dict) -> bytes:
    return _encode(body)
