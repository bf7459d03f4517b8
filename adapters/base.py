"""The small protocols every backend implements: a judge turns prompts into text, a captioner turns frames into text.

Backends know nothing of protocols, verdict codes or the store: `engine/` renders prompts, parses outputs and
caches results. A backend gets a batch (already ordered so that requests sharing a prefix are adjacent), returns one
response per request in the same order, and reports failures per request instead of raising.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class JudgeRequest:
    key: str  # content key; also the cache key
    user: str  # shared prefix first (instructions, caption), varying part last (question, annotation)
    system: str | None = None
    choices: tuple[str, ...] | None = None  # structured output: exactly one of these strings
    json_schema: str | None = None  # structured output: JSON matching this schema (JSON text)
    images: tuple[bytes, ...] = ()  # JPEG bytes, for multimodal judges (a protocol whose judge sees frames)
    max_tokens: int | None = 256  # None: send none (the API default), as official scripts that set none
    temperature: float | None = 0.0  # None: send none (server default), as official scripts with no sampling do
    seed: int | None = 0  # None: send none (each ask a fresh sample), as official scripts that set none
    # What the prompt was rendered from. LLM backends ignore these (the prompt says it all; the cache key is built
    # from the rendered prompt); the local judge (adapters/local_judge.py) answers from them. `task` is
    # "<protocol>/<task>/<step>", e.g. "<protocol>/object_color/judge", "<protocol>/events/extract" (the steps are
    # the protocol's; its stand_in_answer hook reads them). `fields` keys used: caption, annotation, question,
    # options (JSON list), categories (JSON list), reference, answer, event.
    task: str = ""
    fields: Mapping[str, str] = field(default_factory=dict)
    # Which question this is, for backends that answer from a recording (adapters/replay.py) and for logs:
    # item_id, step, sub_index, seed, trial, attempt (0 = first ask, k = k-th re-ask). Not part of the cache key.
    meta: Mapping[str, object] = field(default_factory=dict)


@dataclass
class JudgeResponse:
    key: str
    text: str | None  # None when the backend failed after its retries
    error: str | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # served from a prefix cache, when the backend reports it
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    # thinking models: reasoning tokens as the server counted them (usage.completion_tokens_details), None when it
    # did not say. The reasoning text itself stays in `text` (engine/reasoning.py splits it off before parsing).
    reasoning_tokens: int | None = None
    # a failed request (text None): what the server did answer, per attempt, when it answered something the backend
    # refused (a cut or malformed reply); shown by `capeval show --failed`
    raw_replies: tuple[str, ...] = ()


class BackendFatalError(RuntimeError):
    """Raised by a backend when going on is pointless for every request (HTTP 401/403: wrong key, no access).
    The judge loop stops the run after the requests in flight with one clear line instead of spending the whole
    workload; nothing is cached for the failed requests, so a rerun with the right key asks them again."""


class RequestFeed(Protocol):
    """What a streaming backend pulls requests from (see `StreamingJudge`).

    `take(n)` returns up to n requests that are ready now, without blocking ([] when none are ready). The judge loop
    adds requests between the responses it receives (re-asks, the next step of a multi-step protocol), and sets
    `closed` once nothing more will come; so when a backend has nothing in flight and `take` returns [], `closed` is
    True and the stream ends. A feed may also say `draining` (optional, default False): nothing new will be added
    except follow-ups of the answers still in flight (re-asks, next steps), so a backend may use the slots the drain
    leaves idle (the HTTP backends' tail hedging, adapters/http_chat.py) until those follow-ups come.

    A backend may call `take` and read `closed` from its own thread while the consumer adds to the feed (the HTTP
    backends refill their window on their event-loop thread as each answer comes): a feed that gets requests while
    a stream runs must be thread-safe (WindowFeed is; a fixed list like `ListFeed` needs nothing). So the feed's
    count of requests taken and not yet handed back may pass the window for a moment: the backend takes for a
    slot an answer freed before the consumer has handled that answer."""

    closed: bool

    def take(self, n: int) -> list[JudgeRequest]: ...


class ListFeed:
    """A `RequestFeed` over a fixed list: every request is ready at once, and the feed is closed once all are taken
    (`judge(batch)` over a streaming backend, benchmarks that send a prepared list)."""

    def __init__(self, requests: Sequence[JudgeRequest]):
        self._items = deque(requests)

    @property
    def closed(self) -> bool:
        return not self._items

    def take(self, n: int) -> list[JudgeRequest]:
        return [self._items.popleft() for _ in range(min(int(n), len(self._items)))]


@runtime_checkable
class StreamingJudge(Protocol):
    """Optional: a judge that keeps a bounded window of requests in flight (no batch barriers). `stream` pulls from
    `feed` whenever it has room (at most `max_in_flight` outstanding) and yields each response as it completes, in
    completion order. Backends without it are driven batch by batch through `Judge.judge`."""

    def stream(self, feed: RequestFeed, max_in_flight: int) -> Iterator[JudgeResponse]: ...


@dataclass(frozen=True)
class CaptionRequest:
    key: str
    prompt: str
    frames: np.ndarray = field(repr=False)  # uint8 (T, H, W, 3)
    timestamps: tuple[float, ...] = ()
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0
    context: str | None = None  # segmental mode: captions of the previous segments
    # "image": `frames` is ONE still image (capeval.engine.frames.images), to be sent as an image, never as a video
    media_type: str = "video"
    system: str | None = None  # system message of the prompt, when it has one (prompts read from packs)
    # the same frames already JPEG-encoded (one bytes object per frame) when the frame cache stores them so: a
    # backend that sends JPEG passes these on as they are instead of re-encoding `frames` per request
    encoded_frames: tuple[bytes, ...] | None = field(default=None, repr=False)
    # A question instead of a caption (a construction pipeline's question step): `prompt` is then the
    # whole question as the model should read it (question, lettered options, instruction), and this holds what it
    # was rendered from: id, task, item_id, sub_index, kind ("choice" | "open"), question, options (JSON list).
    # Model backends send `prompt` as for a caption and ignore this; the local captioner answers from it. The reply
    # comes back as the response's `text`. None for every caption request.
    question: Mapping[str, str] | None = None


@dataclass
class CaptionResponse:
    key: str
    text: str | None
    error: str | None = None
    prompt_tokens: int = 0
    n_tokens: int = 0
    latency_s: float = 0.0
    truncated: bool = False  # generation stopped at max_tokens (finish_reason "length"): flagged in the caption row
    frames_sent: int | None = None  # frames actually sent, when a backend cap reduced them (recorded, never silent)
    # as JudgeResponse.reasoning_tokens; `text` is the whole reply until the caption stage strips the reasoning
    # (capeval.engine.reasoning.strip_caption), which keeps the whole reply in `raw_text`
    reasoning_tokens: int | None = None
    raw_text: str | None = None
    # What the backend handed its processor/model about the frames, for the frames-seen ledger
    # (capeval.engine.frames.ledger); every key optional, report what the backend knows:
    #   "backend": str                 e.g. "vllm", "openai-http", "transformers"
    #   "metadata": dict               the video metadata passed to the processor (fps, frames_indices, ...)
    #   "processor_kwargs": dict       kwargs passed to the processor (do_sample_frames, fps, ...)
    #   "sent_as": str                 how the frames went ("video", "images", "jpeg image_url")
    #   "processed_size": str          "WxH" of a frame after the processor's own resize
    #   "visual_tokens": int           visual tokens the processor produced for the frames
    #   "frames_sent": list[int]       positions (in request.frames) of the frames actually sent, when fewer
    processor_inputs: dict | None = None


@runtime_checkable
class Judge(Protocol):
    """What every judge implements. What a judge may declare besides (its window, thread safety, streaming, retry
    reports, batch rounds ...) is listed in `JudgeCapabilities`, read by `judge_capabilities`."""

    name: str  # model name as recorded in verdicts
    revision: str  # weights/version identity; part of every cache key

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]: ...

    def close(self) -> None: ...


@runtime_checkable
class Captioner(Protocol):
    name: str
    revision: str

    def caption(self, requests: Sequence[CaptionRequest]) -> list[CaptionResponse]: ...

    def close(self) -> None: ...


@runtime_checkable
class RetryReportingJudge(Protocol):
    """Optional: a judge that retries requests itself (the HTTP judges, adapters/http_chat.py) and reports each retry
    as it happens. The judge loop calls `watch_retries(callback)` when it starts, then the judge calls `callback(kind)`
    (e.g. "429", "timeout") at each retry, on its own thread; `watch_retries(None)` when the loop ends (the judge
    may serve another loop)."""

    def watch_retries(self, callback: Callable[[str], None] | None) -> None: ...


@runtime_checkable
class RoundJudge(Protocol):
    """Optional: a judge that answers whole rounds of requests (the batch judges, adapters/batch_rounds.py).
    `round_requests` is the round's size: the judge loop gathers that many requests before sending (its window is at
    least that). `use_state_dir(folder)` tells it where its batches' state lives (beside the judgment cache, so a
    rerun resumes them); `forget_answer(key)` drops a kept answer the loop refused (too large), so a rerun asks
    again instead of reading it back."""

    round_requests: int

    def use_state_dir(self, folder: Path) -> None: ...

    def forget_answer(self, key: str) -> None: ...


@runtime_checkable
class TokenLimitJudge(Protocol):
    """Optional: a judge that sends a different `max_tokens` than the request asks (the OpenAI-compatible judge adds
    room for the JSON object around a structured choice); transcripts record what was sent."""

    def sent_max_tokens(self, max_tokens: int | None, choices: Sequence[str] | None,
                        json_schema: str | None) -> int | None: ...


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class JudgeCapabilities:
    """What the judge loop may use of a judge besides `Judge.judge`, each optional on the backend, with the default a
    judge that declares nothing gets:

    - `streaming`: it implements `StreamingJudge.stream` (default False: driven batch by batch through `judge`);
    - `max_in_flight`: the requests it takes at once, which the loop keeps in flight (default None: the loop's default
      window, capeval.engine.judging.window; chosen per backend, docs/judges.md);
    - `thread_safe`: `judge()` may be called from several threads at once (default False: one batch at a time);
    - `max_reply_chars`: the longest reply it accepts before the loop refuses it (default None: the loop's cap);
    - `reports_retries`: a `RetryReportingJudge`; `round_requests`: the round size of a `RoundJudge` (0: none);
      `adjusts_max_tokens`: a `TokenLimitJudge`."""

    streaming: bool = False
    max_in_flight: int | None = None
    thread_safe: bool = False
    max_reply_chars: int | None = None
    reports_retries: bool = False
    round_requests: int = 0
    adjusts_max_tokens: bool = False


def judge_capabilities(judge: Judge) -> JudgeCapabilities:
    """The capabilities `judge` declares (see JudgeCapabilities); a value of the wrong type counts as undeclared."""
    return JudgeCapabilities(
        streaming=isinstance(judge, StreamingJudge),
        max_in_flight=_positive_int(getattr(judge, "max_in_flight", None)),
        thread_safe=bool(getattr(judge, "thread_safe", False)),
        max_reply_chars=_positive_int(getattr(judge, "max_reply_chars", None)),
        reports_retries=isinstance(judge, RetryReportingJudge),
        round_requests=(_positive_int(judge.round_requests) or 0) if isinstance(judge, RoundJudge) else 0,
        adjusts_max_tokens=isinstance(judge, TokenLimitJudge),
    )


@dataclass(frozen=True)
class CaptionerCapabilities:
    """What the caption stage may use of a captioner besides `Captioner.caption`, each optional, with its default:

    - `streaming`: it implements `StreamingCaptioner.acaption` (default False: driven through `caption`);
    - `max_in_flight`: calls kept outstanding per instance (default None: the stage's default);
    - `thread_safe`: `caption()` may run in several threads at once (default False: one call at a time);
    - `actor_cpus`: the CPUs a caption actor reserves on a CPU node, a class attribute read before any instance
      exists (default 1; 0 for HTTP captioners, whose server does the work);
    - `queue_ahead`: calls of `acaption` the stage may keep outstanding beyond `max_in_flight`, which the captioner
      holds in its own queue (request built, waiting for a free slot) and starts the moment a slot frees, so no
      slot waits for the stage to hand over the next task (default 0)."""

    streaming: bool = False
    max_in_flight: int | None = None
    thread_safe: bool = False
    actor_cpus: float = 1.0
    queue_ahead: int = 0


def captioner_capabilities(captioner: Any) -> CaptionerCapabilities:
    """The capabilities a captioner instance or class declares (see CaptionerCapabilities)."""
    cpus = getattr(captioner, "actor_cpus", 1)
    return CaptionerCapabilities(
        streaming=callable(getattr(captioner, "acaption", None)),
        max_in_flight=_positive_int(getattr(captioner, "max_in_flight", None)),
        thread_safe=bool(getattr(captioner, "thread_safe", False)),
        actor_cpus=float(cpus) if isinstance(cpus, (int, float)) and not isinstance(cpus, bool) and cpus >= 0 else 1.0,
        queue_ahead=_positive_int(getattr(captioner, "queue_ahead", None)) or 0,
    )


@runtime_checkable
class StreamingCaptioner(Protocol):
    """Optional: a captioner that takes requests one at a time, many at once (no batch barrier). The caption stage
    keeps up to `max_in_flight` calls of `acaption` outstanding per captioner instance (one event loop per caption
    actor) and stores each caption as it completes; decode runs ahead only as far as that window needs. A failure is
    a CaptionResponse with `error` set, never an exception. Captioners without it are driven through
    `Captioner.caption` (in worker threads, so a slow request still holds only its own slot)."""

    max_in_flight: int

    async def acaption(self, request: CaptionRequest) -> CaptionResponse: ...
