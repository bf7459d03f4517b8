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
import collections
import email.utils
import json
import os
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterator, Sequence

from capeval.adapters.base import BackendFatalError
from capeval.adapters.http_transport import (MAX_BODY_BYTES, ReplyTooLarge, TransportError, TransportTimeout, check_transport,
                                     check_url, make_transport, preload_transport)
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


@dataclass(eq=False)
class _Call:
    """One call asked for (loop thread only): its body, where its answer goes, and its copies running."""
    token: object
    body: bytes
    unwrap: Any
    sink: Any
    started: float
    copies: set = field(default_factory=set)  # asyncio tasks of its copies still running (the first and hedges)
    hedges: int = 0  # hedge copies sent
    failed: ChatResult | None = None  # the first failed answer, kept while another copy may still succeed

    @property
    def key(self) -> tuple[int, object]:
        return call_key(self.sink, self.token)

    @cached_property
    def greedy(self) -> bool:
        """Whether the body asks for temperature 0 (read once, when the call could be copied). Only such a call is
        copied (ChatRunner): copies of a sampled call are different draws, and taking whichever is answered first
        favours the shorter replies."""
        try:
            temperature = json.loads(self.body).get("temperature")
        except (ValueError, AttributeError):
            return False
        return type(temperature) in (int, float) and temperature == 0


def call_key(sink, token) -> tuple[int, object]:
    """Tokens are the caller's (each stream numbers its own from 0): with the sink they name one call."""
    return id(sink), token


_END = object()  # a stream's last item: every request taken was answered and the feed is closed


class _Window:
    """One `ChatRunner.stream`'s window, refilled on the runner's loop thread (all of it runs there, except `poke`
    and the `ended` flag, which the consumer sets). It is the sink of its calls: an answer goes to `out` as
    (request, result) for the generator and frees a slot, which `refill` fills from the feed at once. When slots are
    free and the feed is empty but open, it looks again on a timer (0.5 ms doubling to 50 ms, back to 0.5 ms once it
    took something); the generator also pokes it after handing on each batch, for the follow-ups that batch
    brought. Answers the consumer has not handled yet count against the window beyond ANSWERS_AHEAD of them
    (`room`): a consumer slower than the server holds at most the window and ANSWERS_AHEAD answers, not every
    answer the server could give meanwhile (a judge loop on 2 busy cores had 12,000 answers of a 512-request
    window waiting, ~90 MB, more the longer the run), and a consumer's pause of up to ANSWERS_AHEAD answers still
    keeps every slot busy. Once nothing is outstanding it ends the stream (`_END`) when the feed is closed, or with
    BackendFatalError after a 401/403 (nothing more is taken once one came back)."""

    MIN_DELAY_S, MAX_DELAY_S = 0.0005, 0.05
    ANSWERS_AHEAD = 1024

    def __init__(self, runner: "ChatRunner", feed, limit: int, encode: Callable[[Any], tuple[bytes, Any]]):
        self.runner, self.feed, self.limit, self.encode = runner, feed, limit, encode
        self.out: queue.SimpleQueue = queue.SimpleQueue()  # (request, result), then _END or an exception
        self.requests: dict[int, Any] = {}  # token -> request of the calls outstanding
        self.next_token = 0
        self.hedging = False
        self.ended = False  # the generator is closed (set by the consumer's thread) or the stream ended
        self.scheduled = False  # a refill is queued on the loop (answers of one loop turn share it)
        self.timer: asyncio.TimerHandle | None = None
        self.delay = self.MIN_DELAY_S
        # answers put in `out` (counted on the loop thread) and handled by the consumer (counted on its thread):
        # each counter has one writer, so neither loses a count
        self.answered = 0
        self.handled = 0

    # any thread
    def poke(self) -> None:
        loop = self.runner._loop
        if not self.scheduled and not self.ended and not loop.is_closed():
            self.scheduled = True
            loop.call_soon_threadsafe(self.refill)

    # loop thread
    def put(self, item: tuple) -> None:
        """The runner's sink: (token, result) of an answered call."""
        token, result = item
        request = self.requests.pop(token, None)
        if request is None:  # cancelled meanwhile
            return
        self._hand_on((request, result))
        if not self.scheduled:  # the slot is refilled once the answers of this loop turn are in
            self.scheduled = True
            self.runner._loop.call_soon(self.refill)

    def refill(self) -> None:
        self.scheduled = False
        if self.ended:
            return
        runner, feed = self.runner, self.feed
        took = False
        try:
            while True:
                closed = feed.closed
                room = self.room()
                taken = feed.take(room) if room > 0 and not runner.fatal_error and not self.ended else []
                calls = []
                for request in taken:
                    try:
                        body, unwrap = self.encode(request)
                    except (ValueError, TypeError) as exc:
                        self._hand_on((request, ChatResult(None, f"invalid request: {exc}")))
                        continue
                    token = self.next_token
                    self.next_token += 1
                    self.requests[token] = request
                    calls.append((token, body, unwrap))
                if calls:
                    runner._spawn(calls, self)
                if taken:
                    took = True
                if not self.hedging and self.requests and len(taken) < room and (
                        feed.closed or getattr(feed, "draining", False)):
                    # the feed is empty and nothing new will come (at most follow-ups of the answers in flight,
                    # which take their slots back from hedge copies): the slots the drain frees carry hedge copies
                    runner._start_idle_hedging()
                    self.hedging = True
                if taken and len(self.requests) < self.limit and not calls:
                    continue  # every request taken was refused at once: their slots are still free
                break
            if not self.requests:
                if runner.fatal_error:  # after the requests that were in flight came back
                    self._finish(BackendFatalError(runner.fatal_error))
                    return
                if closed and not taken:
                    self._finish(_END)
                    return
        except BaseException as exc:  # noqa: BLE001 - the feed's or encode's error is the consumer's to raise
            self._finish(exc)
            return
        if took:
            self.delay = self.MIN_DELAY_S
        if self.timer is None and self.room() > 0 and not runner.fatal_error:
            # free slots and an empty feed that is still open: look again soon
            self.timer = runner._loop.call_later(self.delay, self._timer_fired)
            self.delay = min(self.MAX_DELAY_S, self.delay * 2)

    def room(self) -> int:
        """Calls that may start now: the window's free slots, less the answers waiting for the consumer beyond
        ANSWERS_AHEAD (class docstring)."""
        waiting = self.answered - self.handled
        return min(self.limit, self.limit + self.ANSWERS_AHEAD - waiting) - len(self.requests)

    def _hand_on(self, item: tuple) -> None:
        self.answered += 1
        self.out.put(item)

    def _timer_fired(self) -> None:
        self.timer = None
        if not self.scheduled:
            self.refill()

    def _finish(self, item) -> None:
        self.ended = True
        self.out.put(item)
        self.close()

    def close(self) -> None:
        """The stream is over (ended, or its generator was closed early): no more timers, and the calls still
        outstanding are cancelled."""
        self.ended = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.requests:
            self.runner._cancel({call_key(self, token) for token in self.requests})
            self.requests.clear()



class ChatRunner:
    """Runs chat-completion calls (JSON bodies, already encoded) on a private event-loop thread.

    Tail hedging: once a caller says it has nothing more to send (`hedge_idle_slots`; `stream` says so itself when
    its feed is closed and drained), until the calls then running are answered, each slot of the window that comes
    free carries a copy of the longest-outstanding call (at most `max_hedges` copies per call) once that call is
    older than the median answer so far, in a runner that has had at least `max_in_flight` answers (a run longer
    than one window: a shorter one has no drain to shorten, nor a latency to go by). Only greedy calls (temperature
    0 in the body) are copied: the copies of a sampled call (an official protocol's server-default temperature, a
    sampled caption) are different draws, and the first one answered tends to be the shortest, so copying them
    would bias the replies kept. The first good answer is the call's answer and the other copies are cancelled. The copies only fill slots that would sit idle while the last requests drain, so the server never
    sees more than `max_in_flight` requests, and a call asked for later takes its slot back from a hedge copy at
    once. Copies are counted (`hedged_requests`, `hedges_won`); a cancelled copy's tokens are not known (a server
    reports usage only with an answer), so the usage recorded is the winning copy's.
"""

    def __init__(self, base_url: str, api_key: str, *, max_in_flight: int, retry: RetryPolicy, prices: Prices,
                 transport: str = "auto", max_reply_bytes: int = MAX_BODY_BYTES, max_hedges: int = 1):
        check_url(base_url)  # here, not on the loop thread where the pool is made: a bad URL must not hang a call
        check_transport(transport)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.models_url = base_url.rstrip("/") + "/models"  # asked first, for the key's fate (_models_probe)
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
        self._tasks: set[asyncio.Task] = set()  # every copy running (first copies and hedges): the slots in use
        self._hedge_copies = 0  # hedge copies among them
        self._calls: dict[tuple[int, object], _Call] = {}  # calls not answered yet
        # the caller has nothing more to send, until every call running now is answered: free slots may carry
        # hedge copies (a call submitted meanwhile still comes first: _preempt_hedges)
        self._idle = False
        self._copy_seq = 0
        self._latencies: collections.deque = collections.deque(maxlen=1024)  # seconds from call to answer, latest
        self._hedge_timer: asyncio.TimerHandle | None = None
        self.max_hedges = int(max_hedges)
        self.hedged_requests = 0  # hedge copies sent
        self.hedges_won = 0  # calls answered by a hedge copy
        self._auth_known: asyncio.Event | None = None
        self._probing = False
        self.fatal_error: str | None = None  # set once a 401/403 came back
        self.on_retry: Callable[[str], None] | None = None  # told of each retry as it happens (module docstring)
        self._loop = _new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="capeval-http", daemon=True)
        self._thread.start()
        # aiohttp's import (~1 s on a busy machine) happens now, on the loop thread, while the caller goes on
        # starting up: the first request does not wait for it
        self._loop.call_soon_threadsafe(preload_transport)

    # ---- submission (any thread) -------------------------------------------------------------------------------
    def submit(self, calls: Sequence[tuple[object, bytes, str | None]], sink: queue.SimpleQueue) -> None:
        """Start `calls` = [(token, body, unwrap)]; each finished call puts (token, ChatResult) into `sink`."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("OpenAI HTTP backend called from its own event-loop thread")
        if self._loop.is_closed():
            raise RuntimeError("OpenAI HTTP backend is closed")
        self._loop.call_soon_threadsafe(self._spawn, list(calls), sink)

    def cancel(self, tokens: set, sink) -> None:
        """Cancel the calls with these tokens, submitted with `sink`, that are still running (a stream abandoned by
        its consumer)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._cancel, {call_key(sink, t) for t in tokens})

    def hedge_idle_slots(self) -> None:
        """The caller has nothing more to send for now: until the calls running now are all answered, free slots may
        carry hedge copies of them (class docstring)."""
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._start_idle_hedging)

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
        """Bounded window over `feed` (capeval.adapters.base.RequestFeed), kept full by the loop thread: whenever
        fewer than `max_in_flight` calls are outstanding it takes `feed.take(room)`, encodes each request
        (`encode(request)` -> (body, unwrap)) and starts it, so freed slots are refilled while the consumer is busy
        between answers (`_Window`). Yields (request, result) in completion order; a ValueError/TypeError from
        `encode` is yielded at once as that request's error. The feed is used from the loop thread: it must be
        thread-safe when the consumer adds to it while the stream runs (the judge loop's WindowFeed is)."""
        window = _Window(self, feed, max(1, int(max_in_flight)), encode)
        if self._loop.is_closed():
            raise RuntimeError("OpenAI HTTP backend is closed")
        self._loop.call_soon_threadsafe(window.refill)
        out = window.out
        try:
            while True:
                batch = [self.wait(out)]
                while True:
                    try:
                        batch.append(out.get_nowait())
                    except queue.Empty:
                        break
                for item in batch:
                    if type(item) is tuple:
                        yield item
                        window.handled += 1
                    elif item is _END:
                        return
                    else:  # the loop thread's stop: BackendFatalError, or an error of the feed or of `encode`
                        raise item
                # the consumer has handled this batch (and maybe added follow-ups, or closed the feed): with slots free,
                # look at the feed now, not at the timer (a full window is refilled as its answers come anyway)
                if len(window.requests) < window.limit:
                    window.poke()
        finally:
            window.ended = True  # read by the loop thread: nothing more is taken
            if not self._loop.is_closed():
                self._loop.call_soon_threadsafe(window.close)

    # ---- on the loop thread ------------------------------------------------------------------------------------
    def _open(self) -> None:
        if self._transport is None:
            self._transport = make_transport(self.url, self.max_in_flight, self.headers, self.transport_kind,
                                             self.retry.connect_timeout_s, self.max_reply_bytes)
            self._auth_known = asyncio.Event()

    def _spawn(self, calls: list, sink: queue.SimpleQueue) -> None:
        self._open()
        for token, body, unwrap in calls:
            call = _Call(token, body, unwrap, sink, time.perf_counter())
            self._calls[call.key] = call
            self._start_copy(call, hedge=False)
        self._preempt_hedges()

    def _start_copy(self, call: "_Call", hedge: bool) -> None:
        task = self._loop.create_task(self._one(call, hedge))
        task.capeval_token = call.token  # type: ignore[attr-defined]
        task.capeval_hedge = hedge  # type: ignore[attr-defined]
        task.capeval_seq = self._copy_seq  # type: ignore[attr-defined]
        self._copy_seq += 1
        call.copies.add(task)
        self._tasks.add(task)
        task.add_done_callback(self._copy_ended)
        if hedge:
            call.hedges += 1
            self.hedged_requests += 1
            self._hedge_copies += 1

    def _copy_ended(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.capeval_hedge:  # type: ignore[attr-defined]
            self._hedge_copies -= 1
        self._hedge_idle_slots()  # a slot came free

    def _preempt_hedges(self) -> None:
        """Copies beyond the window wait for a slot; a hedge copy holding one gives it up to a first copy (youngest
        hedge first), so hedging never delays a request that was asked for."""
        # The common case costs no scan: every copy has its slot, or no hedge copy holds one. (`_tasks` passes the
        # window for a moment after every answer: a copy that has ended leaves it in its done callback, which runs
        # after the window's refill that the answer scheduled.)
        if len(self._tasks) <= self.max_in_flight or not self._hedge_copies:
            return
        live = [t for t in self._tasks if not t.done() and not t.cancelling()]
        excess = len(live) - self.max_in_flight
        if excess <= 0:
            return
        hedges = sorted((t for t in live if t.capeval_hedge), key=lambda t: t.capeval_seq, reverse=True)
        for task in hedges[:excess]:
            task.cancel()

    def _start_idle_hedging(self) -> None:
        self._idle = True
        self._hedge_idle_slots()

    def _hedge_idle_slots(self) -> None:
        """While the caller has said it has nothing more to send (`hedge_idle_slots`) and the window has free slots,
        send a copy of the longest-outstanding call into each (fewest copies first, at most `max_hedges` per call):
        the first good answer wins, the other copies are cancelled ("The Tail at Scale", Dean & Barroso)."""
        if not self._idle or self.max_hedges <= 0 or self.fatal_error:  # a copy waits for the key's probe as any call
            return
        # Only a run longer than one window has a drain to shorten and enough answers to say how long one takes;
        # a call is copied once it is older than the median answer (a younger one is likely to be answered soon).
        if len(self._latencies) < self.max_in_flight:
            return
        now = time.perf_counter()
        after = sorted(self._latencies)[len(self._latencies) // 2]
        while len(self._tasks) < self.max_in_flight:  # cancelled copies hold their slot until they have ended
            open_calls = [c for c in self._calls.values() if c.hedges < self.max_hedges and c.copies and c.greedy]
            if not open_calls:
                return
            call = min(open_calls, key=lambda c: (c.hedges, c.started))
            if now - call.started < after:  # look again when the oldest of them is old enough
                if self._hedge_timer is None:
                    self._hedge_timer = self._loop.call_later(call.started + after - now, self._hedge_timer_fired)
                return
            self._start_copy(call, hedge=True)

    def _hedge_timer_fired(self) -> None:
        self._hedge_timer = None
        self._hedge_idle_slots()

    def _cancel(self, keys: set) -> None:
        for key in keys:
            call = self._calls.pop(key, None)
            if not self._calls:
                self._idle = False
            if call is not None:
                for task in list(call.copies):
                    task.cancel()

    async def _one(self, call: "_Call", hedge: bool) -> None:
        task = asyncio.current_task()
        try:
            result = await self._call(call.body, call.unwrap)
        except asyncio.CancelledError:
            call.copies.discard(task)
            if not call.copies and call.failed is not None and self._calls.get(call.key) is call:
                self._answer(call, call.failed, hedge=False)  # its last other copy gave its slot up
            raise
        except Exception as exc:  # noqa: BLE001 - never lose a result slot: the caller waits for every token
            result = ChatResult(None, f"client error ({type(exc).__name__}): {exc}"[:300])
        call.copies.discard(task)
        if self._calls.get(call.key) is not call:  # another copy answered first, or the caller cancelled it
            return
        if result.text is None and not result.fatal and call.copies:
            call.failed = call.failed or result  # another copy may still answer: the first error waits for it
            return
        if result.text is None and call.failed is not None:
            result, hedge = call.failed, False  # every copy failed: the first failure is the answer
        self._answer(call, result, hedge)

    def _answer(self, call: _Call, result: ChatResult, hedge: bool) -> None:
        del self._calls[call.key]
        self._latencies.append(time.perf_counter() - call.started)
        if not self._calls:
            self._idle = False  # drained: the next calls start a new stretch of work
        if hedge:
            self.hedges_won += 1
        for other in list(call.copies):
            other.cancel()
        call.sink.put((call.token, result))

    async def _call(self, body: bytes, unwrap: str | None) -> ChatResult:
        if not self._auth_known.is_set():
            if self._probing:  # another request is the probe: wait for its first answer, but not for a stalled one
                try:
                    await asyncio.wait_for(self._auth_known.wait(), self.retry.connect_timeout_s)
                except asyncio.TimeoutError:
                    pass
            else:
                self._probing = True
                await self._models_probe()
        if self.fatal_error:
            return ChatResult(None, f"not sent: {self.fatal_error}", fatal=True)
        try:
            return await self._attempts(body, unwrap)
        finally:
            self._auth_known.set()  # a probe that got no HTTP answer at all lets the others try for themselves

    async def _models_probe(self) -> None:
        """Ask the key's fate of GET {base_url}/models: OpenAI, vLLM and SGLang answer it at once, with the 401/403 a
        wrong key gets on /chat/completions, so the first chat request need not go alone for a whole generation.
        2xx: the key is accepted, every request goes; 401/403: fatal, nothing is sent; anything else (a server
        without /models, no answer): the first chat request is the probe (module docstring)."""
        try:
            status, _, payload = await self._transport.get(self.models_url, self.retry.connect_timeout_s)
        except (TransportError, TransportTimeout):
            return
        if status in FATAL_STATUSES:
            self.fatal_error = (f"HTTP {status} {error_name(status)} from {self.models_url}: "
                                f"{_server_message(payload)} (check the API key and its access to the model)")
            self._auth_known.set()
        elif 200 <= status < 300:
            self._auth_known.set()

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
