"""The small protocols every backend implements: a judge turns prompts into text, a captioner turns frames into text.

Backends know nothing of protocols, verdict codes or the store: `engine/` renders prompts, parses outputs and
caches results. A backend gets a batch (already ordered so that requests sharing a prefix are adjacent), returns one
response per request in the same order, and reports failures per request instead of raising.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class JudgeRequest:
    key: str  # content key; also the cache key
    user: str  # shared prefix first (instructions, caption), varying part last (question, annotation)
    system: str | None = None
    choices: tuple[str, ...] | None = None  # structured output: exactly one of these strings
    json_schema: str | None = None  # structured output: JSON matching this schema (JSON text)
    images: tuple[bytes, ...] = ()  # JPEG bytes, for multimodal judges (VC-Inspector)
    max_tokens: int | None = 256  # None: send none (the API default), as official scripts that set none
    temperature: float | None = 0.0  # None: send none (server default), as official scripts with no sampling do
    seed: int | None = 0  # None: send none (each ask a fresh sample), as official scripts that set none
    # What the prompt was rendered from. LLM backends ignore these (the prompt says it all; the cache key is built
    # from the rendered prompt); the local judge (adapters/local_judge.py) answers from them. `task` is
    # "<protocol>/<task>/<step>", e.g. "capability/object_color/judge", "capquiz/action/answer",
    # "vidcapbench/default/score", "lvcap/scene/answer", "lvcap/events/extract", "lvcap/events/entail",
    # "vcinspector/default/score". `fields` keys used: caption, annotation, question, options (JSON list),
    # categories (JSON list), reference, answer, event.
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
    True and the stream ends."""

    closed: bool

    def take(self, n: int) -> list[JudgeRequest]: ...


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
    context: str | None = None  # LVCap segmental mode: captions of the previous segments
    # "image": `frames` is ONE still image (capeval.engine.frames.images), to be sent as an image, never as a video
    media_type: str = "video"
    system: str | None = None  # system message of the prompt, when it has one (prompts read from packs)
    # the same frames already JPEG-encoded (one bytes object per frame) when the frame cache stores them so: a
    # backend that sends JPEG passes these on as they are instead of re-encoding `frames` per request
    encoded_frames: tuple[bytes, ...] | None = field(default=None, repr=False)
    # A question instead of a caption (CAPability-QA, engine/protocols/capability/construction.py): `prompt` is then the
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


@runtime_checkable
class Judge(Protocol):
    """Optional attribute `max_in_flight` (int): the requests the backend takes at once, which the judge loop keeps
    in flight (capeval.engine.judging.window.judge_window; its default is chosen per backend, docs/judges.md). A judge
    without it gets the loop's default window."""

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
class StreamingCaptioner(Protocol):
    """Optional: a captioner that takes requests one at a time, many at once (no batch barrier). The caption stage
    keeps up to `max_in_flight` calls of `acaption` outstanding per captioner instance (one event loop per caption
    actor) and stores each caption as it completes; decode runs ahead only as far as that window needs. A failure is
    a CaptionResponse with `error` set, never an exception. Captioners without it are driven through
    `Captioner.caption` (in worker threads, so a slow request still holds only its own slot)."""

    max_in_flight: int

    async def acaption(self, request: CaptionRequest) -> CaptionResponse: ...
