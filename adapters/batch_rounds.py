"""A judge that answers in batches: each round of the judge loop becomes one or more batch files.

The judge loop (engine/judging/loop.py) drives it like any streaming judge. The judge's `round_requests` makes the
loop's window as large as a round, so `stream` takes every ready request at once (first steps, re-asks and next
steps alike), writes them as batch files (adapters/batch_files.py: the streaming judge's very bodies), has the
provider run them, and yields each batch's answers when it is done; the loop parses, re-asks and caches them as it
does a stream's, then hands over the next round. Subclasses are the providers: OpenAI's Batch API
(adapters/openai_batch.py) and vLLM's offline runner (adapters/vllm_batch.py). They implement `settle`, `submit`,
`poll` and `fetch` over `capeval.adapters.batch_state.BatchState`.

Before anything is sent, each request is looked up in the state: an answer downloaded earlier (same key, same body)
is served at once; a request that a batch not yet collected holds waits for that batch (made by this process or by
one that was killed); only the rest go into new batches, split at `max_file_requests` / `max_file_bytes`. A request
that a finished batch did not answer (failed, expired, cancelled) comes back as an error: the loop records it as a
retryable judge error, and a rerun sends exactly those requests again. So does a rejected answer: one that is not a
completion with text (`choices: []`), a custom_id answered by several lines of one file, or a reply the judge loop
refuses (over its reply-size cap: the loop calls `forget_answer`); none of them stays in the state.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterator, Sequence

from capeval.adapters.base import BackendFatalError, JudgeRequest, JudgeResponse, ListFeed
from capeval.adapters.batch_files import BatchLine, batch_line, read_results, split
from capeval.adapters.batch_state import BatchesPending, BatchState, no_wait
from capeval.adapters.http_chat import RAW_REPLY_CHARS, Prices, TruncatedReply, parse_completion
from capeval.adapters.openai_http import HTTPConfig, OpenAIJudge
from capeval.engine.errors import AbortedError
from capeval.engine.params import Param

log = logging.getLogger(__name__)

#: OpenAI's documented limits of one batch input file
OPENAI_MAX_REQUESTS = 50_000
OPENAI_MAX_BYTES = 200 * 1000 * 1000  # "200 MB": counted in decimal megabytes, the smaller reading


@dataclass
class BatchOptions:
    state_dir: str | None = None  # None: beside the judgment cache (`<cache>/batches`), else .capeval/batches
    round_requests: int = OPENAI_MAX_REQUESTS  # the judge loop's window: requests gathered into one round
    max_file_requests: int = OPENAI_MAX_REQUESTS  # per batch file (a round above it is split)
    max_file_bytes: int = OPENAI_MAX_BYTES
    poll_s: float = 10.0  # first wait between polls; grows x1.5 up to poll_max_s
    poll_max_s: float = 300.0
    # polls in a row that may report a status capeval does not know before the batch is given up (cancelled,
    # recorded as failed with the reason; its requests are sent again by the next run)
    max_unknown_polls: int = 20
    # the provider's batch price as a share off the streaming prices (price_*_per_m): OpenAI's Batch API is 50% off
    batch_discount: float = 0.5
    wait: bool = True  # False: submit and stop with BatchesPending (exit code PENDING); a rerun collects


def round_params(defaults: BatchOptions) -> tuple[Param, ...]:
    """The round options a batch judge takes, with its defaults (engine/params.py)."""
    return (Param("state_dir", (str, type(None)), None, "where the batches' state lives (default: beside the judgment "
                  "cache)"),
            Param("round_requests", (int,), defaults.round_requests, "requests gathered into one round"),
            Param("max_file_requests", (int,), defaults.max_file_requests, "requests per batch file"),
            Param("max_file_bytes", (int,), defaults.max_file_bytes, "bytes per batch file"),
            Param("batch_discount", (float,), defaults.batch_discount, "the batch price as a share off the "
                  "streaming prices"),
            Param("wait", (bool,), defaults.wait, "false: submit and stop (exit code PENDING); a rerun collects"))


def check_options(opts: BatchOptions) -> None:
    for name in ("round_requests", "max_file_requests", "max_file_bytes", "max_unknown_polls"):
        value = getattr(opts, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")
    for name in ("poll_s", "poll_max_s"):
        value = getattr(opts, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}: expected a number >= 0, got {value!r}")
    d = opts.batch_discount
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 <= d <= 1.0:
        raise ValueError(f"batch_discount: expected a share between 0 and 1, got {d!r}")
    if not isinstance(opts.wait, bool):
        raise ValueError(f"wait: expected true or false, got {opts.wait!r}")
    if opts.state_dir is not None and not isinstance(opts.state_dir, str):
        raise ValueError(f"state_dir: expected a folder path, got {opts.state_dir!r}")


def http_params(params: dict) -> dict:
    """The HTTPConfig options among a batch judge's other params; an unknown name raises ValueError."""
    http_names = {f.name for f in fields(HTTPConfig)}
    for key in params:
        if key not in http_names:
            valid = sorted(http_names | {f.name for f in fields(BatchOptions)})
            raise ValueError(f"unknown option {key!r}; valid: {valid}")
    return dict(params)


@dataclass
class _Waiting:
    request: JudgeRequest
    unwrap: str | None
    body_sha: str
    local: int  # the batch (BatchState row) that will answer it


class BatchJudge:
    """The provider-independent part (see the module docstring). Subclasses set `self.config` (HTTPConfig: model,
    structured mode, prices, reasoning tags), `self.options` and `provider` (the state's name for the endpoint)."""

    thread_safe = False
    provider = ""
    default_batch_discount = BatchOptions.batch_discount  # engine/sweep/prices.py prices a run's tokens with it

    config_class = HTTPConfig  # its params besides its own (engine/params.py): the HTTP config's fields

    def __init__(self, config: HTTPConfig, options: BatchOptions):
        check_options(options)
        self.config, self.options = config, options
        self.name = config.model
        self.revision = config.revision or config.model  # as the streaming judge: both answer the same requests
        self.round_requests = options.round_requests  # read by the judge loop (its window)
        keep = 1.0 - float(options.batch_discount)
        self.prices = Prices(config.price_prompt_per_m * keep,
                             None if config.price_cached_per_m is None else config.price_cached_per_m * keep,
                             config.price_completion_per_m * keep)
        self._folder = Path(options.state_dir) if options.state_dir else None
        self._state: BatchState | None = None

    # -- provider hooks -----------------------------------------------------------------------------------------------
    def settle(self, state: BatchState) -> None:
        """Resolve rows a killed process left `uploading` / `creating` (drop them, or adopt the provider's batch)."""

    def submit(self, state: BatchState, chunk: list[BatchLine]) -> int:
        raise NotImplementedError

    def poll(self, state: BatchState, locals_: list[int]) -> list[int]:
        """Refresh these batches' status in the state; the local ids that are finished (answer nothing more)."""
        raise NotImplementedError

    def fetch(self, state: BatchState, local: int) -> tuple[bytes | None, bytes | None]:
        """A finished batch's output and error files."""
        raise NotImplementedError

    def where(self) -> str:
        return self.provider

    def forget_answer(self, key: str) -> None:
        """The judge loop refused this answer (over its reply-size cap): it leaves the state, so a rerun sends the
        request again instead of being served the same answer forever."""
        self.state.forget_answers([key])

    # -- state --------------------------------------------------------------------------------------------------------
    def use_state_dir(self, folder) -> None:
        """Called by the judge loop with the folder beside its judgment cache (unless `state_dir` names one)."""
        if self.options.state_dir is None and Path(folder) != self._folder:
            if self._state is not None:
                self._state.close()
                self._state = None
            self._folder = Path(folder)

    @property
    def state(self) -> BatchState:
        if self._state is None:
            self._state = BatchState(self._folder or Path(".capeval") / "batches")
            self.settle(self._state)
        return self._state

    def body(self, r: JudgeRequest) -> tuple[bytes, str | None]:
        return OpenAIJudge.body(self, r)  # the streaming judge's own body, byte for byte

    def sent_max_tokens(self, max_tokens: int | None, choices, json_schema) -> int | None:
        return OpenAIJudge.sent_max_tokens(self, max_tokens, choices, json_schema)

    # -- the judge ----------------------------------------------------------------------------------------------------
    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        unique = list({r.key: r for r in requests}.values())
        got = {resp.key: resp for resp in self.stream(ListFeed(unique), len(unique) or 1)}
        return [got.get(r.key) or JudgeResponse(r.key, None, "no answer from the batch") for r in requests]

    def stream(self, feed, max_in_flight: int | None = None) -> Iterator[JudgeResponse]:
        limit = max(1, int(max_in_flight or self.round_requests))
        waiting: dict[str, _Waiting] = {}
        delay = self.options.poll_s
        while True:
            taken = feed.take(limit)
            if taken:
                yield from self._admit(taken, waiting)
                delay = self.options.poll_s
                continue
            if not waiting:
                if feed.closed:
                    return
                time.sleep(0.005)
                continue
            open_ids = sorted({w.local for w in waiting.values()})
            finished = self.poll(self.state, open_ids)
            for local in finished:
                yield from self._collect(local, waiting)
            if finished:
                continue
            if not self.options.wait or no_wait():
                raise BatchesPending(f"{len(open_ids)} batch(es) holding {len(waiting)} request(s) are not finished "
                                     f"at {self.where()} (state: {self.state.path}); run the same command again to "
                                     "collect them")
            log.info("judge %s: %d batch(es), %d requests pending; next poll in %.0f s", self.name, len(open_ids),
                     len(waiting), delay)
            time.sleep(delay)
            delay = min(self.options.poll_max_s, max(delay * 1.5, 0.01))

    def _admit(self, taken: list[JudgeRequest], waiting: dict[str, _Waiting]) -> Iterator[JudgeResponse]:
        lines: list[tuple[JudgeRequest, BatchLine]] = []
        for r in taken:
            try:
                body, unwrap = self.body(r)
            except (ValueError, TypeError) as exc:  # e.g. a json_schema that is not JSON: this request only
                yield JudgeResponse(r.key, None, f"invalid request: {exc}")
                continue
            lines.append((r, batch_line(r.key, body, unwrap)))
        pairs = [(bl.key, bl.body_sha) for _, bl in lines]
        stored = self.state.answers(pairs)
        unwraps = {bl.key: bl.unwrap for _, bl in lines}
        served = {k: self._response(k, body, unwraps[k], 0.0) for k, body in stored.items()}
        unreadable = [k for k, resp in served.items() if resp.error is not None]
        if unreadable:  # kept by an earlier version: rejected answers leave the state and are asked again
            self.state.forget_answers(unreadable)
            stored = {k: v for k, v in stored.items() if k not in unreadable}
        held = self.state.open_batch_of(self.provider, [p for p in pairs if p[0] not in stored])
        fresh: list[tuple[JudgeRequest, BatchLine]] = []
        for r, bl in lines:
            if bl.key in stored:  # downloaded before (a killed run's batch, or another round's): never asked again
                yield served[bl.key]
            elif bl.key in held:
                waiting[r.key] = _Waiting(r, bl.unwrap, bl.body_sha, held[bl.key])
            else:
                fresh.append((r, bl))
        if held:
            log.info("judge %s: %d request(s) wait for batches submitted earlier", self.name, len(held))
        by_key = {bl.key: r for r, bl in fresh}
        chunks, too_big = split([bl for _, bl in fresh], self.options.max_file_requests, self.options.max_file_bytes)
        for bl in too_big:
            yield JudgeResponse(bl.key, None, f"request of {len(bl.line):,} bytes does not fit a batch file "
                                              f"(max_file_bytes {self.options.max_file_bytes:,})")
        for chunk in chunks:
            try:
                local = self.submit(self.state, chunk)
            except (BackendFatalError, AbortedError):
                raise
            except Exception as exc:  # noqa: BLE001 - these requests fail (retryable); the run goes on
                for bl in chunk:
                    yield JudgeResponse(bl.key, None, f"batch not submitted ({type(exc).__name__}): {exc}"[:300])
                continue
            for bl in chunk:
                waiting[bl.key] = _Waiting(by_key[bl.key], bl.unwrap, bl.body_sha, local)

    def _collect(self, local: int, waiting: dict[str, _Waiting]) -> Iterator[JudgeResponse]:
        state = self.state
        row = state.batch(local) or {"status": "lost", "note": "its record is gone from the state"}
        mine = [k for k, w in waiting.items() if w.local == local]
        if row["status"] in ("collected", "lost"):  # another process sharing the state collected it first
            stored = state.answers([(k, waiting[k].body_sha) for k in mine])
            for key in mine:
                w = waiting.pop(key)
                yield (self._response(key, stored[key], w.unwrap, 0.0) if key in stored else
                       JudgeResponse(key, None, f"batch {row.get('batch_id')} {row['status']} ({row.get('note')}) "
                                                "without an answer to this request"))
            return
        results = read_results(*self._download(row))
        keys = state.keys_of(local)
        turnaround = max(0.0, time.time() - float(row.get("created") or time.time()))
        # only answers that read as a completion with text enter the state: a rejected one (`choices: []`, no text)
        # is an error now and its request is sent again by the next run, never served from the state forever
        read = {k: self._response(k, r.body, waiting[k].unwrap if k in waiting else None, turnaround)
                for k, r in results.items() if r.body is not None and k in keys}
        answers = {k: (keys[k], results[k].body) for k, resp in read.items() if resp.error is None}
        status = row["status"]
        state.collect(local, answers, status, row.get("note"))  # durable before the loop sees any of it
        repeated = {k: r.lines for k, r in results.items() if r.lines > 1}
        if repeated:
            log.warning("judge %s: batch %s answers %d custom_id(s) with more than one line (%d lines); none of them "
                        "is taken and a rerun sends those requests again", self.name, row.get("batch_id"),
                        len(repeated), sum(repeated.values()))
        if len(answers) < len(keys):
            log.warning("judge %s: batch %s ended %s with %d of %d requests unanswered or rejected (a rerun sends "
                        "only those)", self.name, row.get("batch_id"), status, len(keys) - len(answers), len(keys))
        for key in mine:
            w = waiting.pop(key)
            res = results.get(key)
            if key in read:
                yield read[key]
            else:
                why = res.error if res is not None else "no answer in its output"
                note = f" ({row['note']})" if row.get("note") else ""
                yield JudgeResponse(key, None, f"batch {row.get('batch_id')} {status}{note}: {why}"[:500])

    def _download(self, row: dict) -> tuple[bytes | None, bytes | None]:
        for attempt in range(3):
            try:
                return self.fetch(self.state, row["id"])
            except (BackendFatalError, AbortedError):
                raise
            except Exception as exc:  # noqa: BLE001 - the batch is done; the provider keeps its files
                if attempt == 2:
                    raise AbortedError(f"judge {self.name}: could not download the results of batch "
                                       f"{row.get('batch_id')} ({exc}); run again to collect them") from None
                time.sleep(1.0 + 2 * attempt)
        raise AssertionError("unreachable")

    def _response(self, key: str, body: bytes, unwrap: str | None, latency_s: float) -> JudgeResponse:
        try:
            res = parse_completion(body, unwrap, self.prices)
        except TruncatedReply as exc:  # the structured answer was cut at max_tokens: the message says how to fix it
            return JudgeResponse(key, None, str(exc)[:500], raw_replies=(exc.content[:RAW_REPLY_CHARS],))
        except Exception as exc:  # noqa: BLE001 - a malformed completion fails this request only
            return JudgeResponse(key, None, f"bad response body ({type(exc).__name__}): {exc}"[:300])
        return JudgeResponse(key, res.text, None, res.prompt_tokens, res.cached_prompt_tokens, res.completion_tokens,
                             latency_s, res.cost_usd, reasoning_tokens=res.reasoning_tokens)

    def close(self) -> None:
        if self._state is not None:
            self._state.close()
            self._state = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
