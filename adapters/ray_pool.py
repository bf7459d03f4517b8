"""A pool of Ray actors, each holding one judge (one per GPU; CPU-only actors on machines without GPUs).

The pool is itself a Judge: callers hand it one ordered list of requests and get one response per request, in the
same order. Internally the list is cut into batches without splitting a group of requests that share a prefix
(same caption), so each group lands on one engine and hits its prefix cache. Batches are fed with backpressure (at
most `batches_per_actor` batches per actor, `ray.wait` for the next finished one). An actor that dies is restarted by
Ray (`max_restarts`) and the batch it held is sent again (to any live actor) up to `batch_retries` times; after that
its requests get per-request errors, so nothing is lost silently.

`stream(feed, max_in_flight)` (capeval.adapters.base.StreamingJudge, used by the streaming judge loop) has the actors PULL
work: whenever an actor has fewer than `batches_per_actor` batches of its own, it gets the next caption-whole batch
from the feed, and each batch's answers are yielded as soon as it returns. A slow actor holds only its own batches;
the others keep pulling, so it never stalls the rest (no barrier across actors or batches).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from capeval.adapters.base import BackendFatalError, Judge, JudgeRequest, JudgeResponse
from capeval.engine.ray_local import ray_usable
from capeval.engine.registry import lookup

log = logging.getLogger(__name__)

JudgeFactory = Callable[[], Judge]


def group_key(request: JudgeRequest) -> str:
    """Requests with the same key share a prompt prefix: the caption when the renderer says so, else the system
    prompt plus the start of the user prompt (shared prefix first, by the JudgeRequest convention)."""
    caption = request.fields.get("caption") if request.fields else None
    if caption is not None:
        return f"{request.system or ''}\0{caption}"
    return f"{request.system or ''}\0{request.user[:512]}"


def grouped_batches(requests: Sequence[JudgeRequest], batch_size: int) -> list[list[int]]:
    """Indices cut into batches of about `batch_size`, never splitting a run of adjacent same-group requests unless
    the run alone exceeds `batch_size` (then it is cut into full batches)."""
    runs: list[list[int]] = []
    last = None
    for i, r in enumerate(requests):
        k = group_key(r)
        if runs and k == last:
            runs[-1].append(i)
        else:
            runs.append([i])
        last = k
    batches: list[list[int]] = []
    current: list[int] = []
    for run in runs:
        if current and len(current) + len(run) > batch_size:
            batches.append(current)
            current = []
        while len(run) > batch_size:
            batches.append(run[:batch_size])
            run = run[batch_size:]
        current.extend(run)
    if current:
        batches.append(current)
    return batches


class _JudgeActor:
    """Holds one judge inside a Ray worker process."""

    def __init__(self, factory: JudgeFactory | str, kwargs: dict[str, Any]):
        if isinstance(factory, str):
            factory_fn = lookup("judge", factory)
            self._judge = factory_fn(**kwargs)
        else:
            self._judge = factory(**kwargs)

    def identity(self) -> tuple[str, str]:
        return self._judge.name, self._judge.revision

    def judge(self, requests: list[JudgeRequest]) -> list[JudgeResponse]:
        return self._judge.judge(requests)

    def stats(self) -> dict:
        fn = getattr(self._judge, "prefix_cache_stats", None)
        return fn() if fn else {}

    def close(self) -> None:
        self._judge.close()


@dataclass
class _Batch:
    idx: list[int]
    attempts: int = 0
    errors: list[str] = field(default_factory=list)
    requests: list = field(default_factory=list)  # stream(): the batch's own requests


class JudgePool:
    """Judge protocol over `num_actors` Ray actors, each running `judge` (a registered judge name, or a factory
    callable) built with `judge_kwargs`. Ray must be initialised by the caller (`ray.init`)."""

    def __init__(
        self,
        judge: str | JudgeFactory,
        judge_kwargs: dict[str, Any] | None = None,
        *,
        num_actors: int | None = None,
        num_gpus_per_actor: float | None = None,
        num_cpus_per_actor: float = 1,
        batch_size: int = 256,
        batches_per_actor: int = 2,
        max_restarts: int = 3,
        batch_retries: int = 3,
    ):
        import ray

        if not ray.is_initialized():
            raise RuntimeError("JudgePool needs a running Ray: call ray.init() (or connect to a cluster) first")
        gpus = ray.cluster_resources().get("GPU", 0)
        if num_gpus_per_actor is None:  # a tensor-parallel engine needs all its GPUs in one actor
            num_gpus_per_actor = int((judge_kwargs or {}).get("tensor_parallel_size", 1)) if gpus >= 1 else 0
        if num_actors is None:  # one per GPU, or one on a CPU-only cluster
            num_actors = max(1, int(gpus // num_gpus_per_actor)) if num_gpus_per_actor else 1
        if batch_size < 1 or batches_per_actor < 1 or num_actors < 1:
            raise ValueError(f"batch_size, batches_per_actor, num_actors must be >= 1 (got {batch_size}, "
                             f"{batches_per_actor}, {num_actors})")  # fmt: skip
        judge_kwargs = dict(judge_kwargs or {})
        window = judge_kwargs.pop("max_in_flight", None)  # the pool's window, not one engine's
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"max_in_flight: expected an integer >= 1, got {window!r}")
        self.batch_size = batch_size
        self.batches_per_actor = batches_per_actor
        # The judge loop's window (capeval.engine.judging.window.judge_window): the judge's max_in_flight param, else every
        # actor's batches full
        self.max_in_flight = window or num_actors * batches_per_actor * batch_size
        self.batch_retries = batch_retries
        actor_cls = ray.remote(_JudgeActor).options(
            num_gpus=num_gpus_per_actor, num_cpus=num_cpus_per_actor, max_restarts=max_restarts, max_task_retries=0
        )
        self._actors = [actor_cls.remote(judge, dict(judge_kwargs or {})) for _ in range(num_actors)]
        identities = ray.get([a.identity.remote() for a in self._actors])
        if len(set(identities)) != 1:
            raise RuntimeError(f"pool actors disagree on judge identity: {sorted(set(identities))}")
        self.name, self.revision = identities[0]

    @property
    def actors(self) -> list:
        return list(self._actors)

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        import ray
        from ray.exceptions import RayActorError

        requests = list(requests)
        out: list[JudgeResponse | None] = [None] * len(requests)
        pending = [_Batch(b) for b in grouped_batches(requests, self.batch_size)]
        pending.reverse()  # pop() from the end keeps submission in request order
        in_flight: dict[Any, tuple[int, _Batch]] = {}
        load = [0] * len(self._actors)
        done_batches, total = 0, len(pending)
        t0 = time.monotonic()
        while pending or in_flight:
            # Fill every actor up to batches_per_actor batches (backpressure: the rest waits here, not in Ray's queues).
            while pending:
                a = min(range(len(load)), key=load.__getitem__)
                if load[a] >= self.batches_per_actor:
                    break
                batch = pending.pop()
                batch.attempts += 1
                ref = self._actors[a].judge.remote([requests[i] for i in batch.idx])
                in_flight[ref] = (a, batch)
                load[a] += 1
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            ref = ready[0]
            a, batch = in_flight.pop(ref)
            load[a] -= 1
            try:
                responses = ray.get(ref)
            except RayActorError as exc:  # the actor died: Ray restarts it; the batch goes round again
                batch.errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                log.warning("judge actor %d died on a batch of %d (attempt %d): %s", a, len(batch.idx),
                            batch.attempts, batch.errors[-1])  # fmt: skip
                if batch.attempts <= self.batch_retries:
                    pending.append(batch)
                    continue
                responses = [JudgeResponse(key=requests[i].key, text=None,
                                           error=f"judge actor died {batch.attempts} times: {batch.errors[-1]}")
                             for i in batch.idx]  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - a judge that raises: report per request, keep the pool
                responses = [JudgeResponse(key=requests[i].key, text=None, error=f"{type(exc).__name__}: {exc}")
                             for i in batch.idx]  # fmt: skip
            if len(responses) != len(batch.idx):
                raise RuntimeError(f"judge returned {len(responses)} responses for {len(batch.idx)} requests")
            for i, r in zip(batch.idx, responses):
                out[i] = r
            done_batches += 1
            log.info("judge pool: %d/%d batches done (%.1fs)", done_batches, total, time.monotonic() - t0)
        return out  # type: ignore[return-value]

    def stream(self, feed, max_in_flight: int):
        """Pull-based streaming over the actors (see the module docstring). At most `max_in_flight` requests are
        out at once; batches are cut at caption-group boundaries (a group longer than a batch is cut)."""
        import ray
        from ray.exceptions import RayActorError

        n = len(self._actors)
        size = max(1, min(self.batch_size, max_in_flight // (n * self.batches_per_actor) or 1))
        carry: list[JudgeRequest] = []  # taken from the feed, not yet in a batch (the rest of a caption group)
        retry: list[_Batch] = []  # batches whose actor died, with their requests
        in_flight: dict[Any, tuple[int, _Batch, list[JudgeRequest]]] = {}
        load = [0] * n
        out_count = 0  # requests in batches at the actors

        def next_batch(room: int) -> list[JudgeRequest]:
            nonlocal carry
            want = min(size, room)
            if len(carry) <= want:
                carry += feed.take(want + 1 - len(carry))  # one more: is the last group complete?
            if len(carry) <= want:
                batch, carry = carry, []
                return batch
            cut = want
            while cut > 1 and group_key(carry[cut - 1]) == group_key(carry[cut]):
                cut -= 1
            if group_key(carry[cut - 1]) == group_key(carry[cut]):
                cut = want  # one group longer than a batch: cut it
            batch, carry = carry[:cut], carry[cut:]
            return batch

        while True:
            for a in sorted(range(n), key=load.__getitem__):  # every actor with room pulls, least loaded first
                while load[a] < self.batches_per_actor and out_count < max_in_flight:
                    if retry:
                        batch = retry.pop()
                        reqs = batch.requests
                    else:
                        reqs = next_batch(max_in_flight - out_count)
                        if not reqs:
                            break
                        batch = _Batch(list(range(len(reqs))), requests=reqs)
                    batch.attempts += 1
                    in_flight[self._actors[a].judge.remote(reqs)] = (a, batch, reqs)
                    load[a] += 1
                    out_count += len(reqs)
            if not in_flight:
                if not carry and not retry and feed.closed:
                    return
                time.sleep(0.001)  # the consumer is still handing back answers
                continue
            (ref,), _ = ray.wait(list(in_flight), num_returns=1)
            a, batch, reqs = in_flight.pop(ref)
            load[a] -= 1
            out_count -= len(reqs)
            try:
                responses = ray.get(ref)
            except RayActorError as exc:
                batch.errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                log.warning("judge actor %d died on a batch of %d (attempt %d): %s", a, len(reqs), batch.attempts,
                            batch.errors[-1])
                if batch.attempts <= self.batch_retries:
                    retry.append(batch)
                    continue
                responses = [JudgeResponse(key=r.key, text=None, error=f"judge actor died {batch.attempts} times: "
                                                                       f"{batch.errors[-1]}") for r in reqs]
            except BackendFatalError:
                raise
            except Exception as exc:  # noqa: BLE001 - a judge that raises: per-request errors, keep the pool
                cause = getattr(exc, "cause", None)
                if isinstance(cause, BackendFatalError):
                    raise cause from None
                responses = [JudgeResponse(key=r.key, text=None, error=f"{type(exc).__name__}: {exc}") for r in reqs]
            if len(responses) != len(reqs):
                responses = [JudgeResponse(key=r.key, text=None, error=f"judge returned {len(responses)} responses "
                                                                       f"for {len(reqs)} requests") for r in reqs]
            yield from responses

    def stats(self) -> list[dict]:
        """Per-actor judge statistics (e.g. prefix-cache use of a vLLM judge)."""
        import ray

        return ray.get([a.stats.remote() for a in self._actors])

    def close(self) -> None:
        import ray

        if not ray_usable():  # after a SIGTERM the actors may be dead with the GCS: the watchdog ends them
            self._actors = []
            return
        for a in self._actors:
            try:
                ray.get(a.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - a dead actor has nothing to close
                pass
            ray.kill(a, no_restart=True)
        self._actors = []
