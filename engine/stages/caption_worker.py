"""What runs inside each caption actor: the captioner, one caption task at a time, many at once.

`CaptionWorker.caption_one(task)` is a coroutine: a Ray actor with it is an async actor (one event loop per
actor), so the stage keeps up to `window` tasks outstanding per actor and each finishes on its own (no batch
barrier); the stage hands them over in groups (`caption_group(tasks)`: an async generator yielding the rows as they
finish, one Ray call for all the tasks that free slots take at once). A streaming captioner (capeval.adapters.base.StreamingCaptioner: `acaption`) is awaited directly; a sync captioner
(`caption(batch)` only) runs in worker threads, one request per call, so a slow request holds only its own slot
(`threads` of them when the captioner says it is `thread_safe`, else one thread and one request queued behind it).

Frames are read only when a call starts (capeval.engine.frames.cache.load_frames), so decoded frames are held for the
requests in the window and no longer. Segmental tasks caption their segments one after another (each is
conditioned on the previous captions) inside one call; different videos stream concurrently.

`timestamps` (a captioner option, "none" or "text"): with "text" the stage appends the frame timestamps to the
video prompt; with "none" (the default) the prompt is sent exactly as written.

A thinking captioner's reasoning (engine/reasoning.py, the captioner's `reasoning_tags`) is stripped from every
reply as it comes back (`_one`), so neither a caption row's `text` nor a later segment's context holds it; the row
keeps the whole reply in `raw_text` and counts `reasoning_tokens`.
"""

from __future__ import annotations

import asyncio
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property

from capeval.adapters.base import CaptionerCapabilities, captioner_capabilities
from capeval.engine.faultpoints import hit
from capeval.engine.reasoning import caption_row_fields, strip_caption, tags_of

TIMESTAMP_MODES = ("none", "text")
SYNC_THREADS = 8  # threads for a thread-safe sync captioner that names no max_in_flight


@dataclass(frozen=True)
class CaptionTask:
    caption_key: str
    video_id: str
    frames_path: str  # frames of the decode stage, read through capeval.engine.frames.cache.load_frames
    timestamps: tuple[float, ...]
    frame_spec: str
    prompt_id: str
    prompt_text: str
    segments: int = 0  # >0: segmental mode, captioned in this many consecutive segments with context
    max_tokens: int = 512
    media_type: str = "video"  # "image": the frames are one still image, sent as an image
    timestamps_mode: str = "none"  # "text": the frame timestamps are appended to the video prompt
    system: str | None = None  # the prompt's system message (packs), sent as it is
    question: str | None = None  # a construction question: its fields as JSON text (capeval.adapters.base.CaptionRequest)
    # segmental mode: the video's own scene cuts (seconds, from its items' extra): segments split there
    boundaries: tuple[float, ...] = ()


def prompt_with_timestamps(prompt: str, timestamps, mode: str) -> str:
    """The prompt text a captioner receives: as written, unless mode is "text" (then the timestamps follow it)."""
    if mode != "text" or not timestamps:
        return prompt
    return f"{prompt}\n(Frame timestamps in seconds: {', '.join(f'{t:.2f}' for t in timestamps)})"


def segment_chunks(frame_spec: str, n_frames: int, n_segments: int, timestamps=(), boundaries=()) -> list[list[int]]:
    """Frame indices of each captioning segment: with `boundaries` (the video's own scene cuts, seconds) the frames
    of each scene, by timestamp (a scene no frame falls in has no segment; `len(boundaries) + 1` equal parts when
    timestamps are unknown); else the frame spec's own segments when it is a `segments:` spec (by each frame's
    timestamp against the segment edges; `per` consecutive frames when timestamps are unknown); else `n_segments`
    equal parts."""
    import numpy as np

    from capeval.engine.frames.sampling import FrameSpec, KeyframeSnap, Segments

    idx = np.arange(n_frames)
    if len(boundaries):
        if len(timestamps) == n_frames and n_frames:
            seg = np.searchsorted(np.asarray(boundaries, dtype=float), np.asarray(timestamps, dtype=float),
                                  side="right")
            return [idx[seg == s].tolist() for s in np.unique(seg)]
        return [part.tolist() for part in np.array_split(idx, max(1, min(len(boundaries) + 1, n_frames)))]
    spec = FrameSpec.parse(frame_spec)
    if isinstance(spec, KeyframeSnap):
        spec = spec.spec
    if isinstance(spec, Segments):
        if len(timestamps) == n_frames and n_frames:
            ts = np.asarray(timestamps, dtype=float)
            seg = (np.floor(ts / spec.length_s) if spec.length_s else
                   np.searchsorted(np.asarray(spec.boundaries, dtype=float), ts, side="right"))
            return [idx[seg == s].tolist() for s in np.unique(seg)]
        return [idx[i:i + spec.per_segment].tolist() for i in range(0, n_frames, spec.per_segment)]
    return [part.tolist() for part in np.array_split(idx, max(1, min(n_segments, n_frames)))]


def load_task_frames(task: CaptionTask):
    """(frames, JPEG bytes or None) of a task, through the frame cache (its `load_encoded_frames`, when the cache
    offers it, gives the frames already JPEG-encoded so HTTP captioners send them without re-encoding)."""
    from capeval.engine.frames import cache, shards

    # one read of the stored entry: the arrays are decoded from the same JPEG bytes the backend may send as they are
    encoded = cache.load_encoded_frames(task.frames_path)
    if encoded is None:  # an older cache's .npy
        return cache.load_frames(task.frames_path), None
    return shards.decode_jpegs(encoded), tuple(encoded)


def row(t: CaptionTask, captioner: str, text, error, n_tokens, prompt_tokens, latency, *, truncated: bool = False,
        frames_sent: int | None = None, raw_text: str | None = None, reasoning_tokens: int | None = None,
        frames_seen: str | None = None) -> dict:
    return {
        "caption_key": t.caption_key, "captioner": captioner, "prompt_id": t.prompt_id, "frame_spec": t.frame_spec,
        "video_id": t.video_id, "text": text, "n_tokens": int(n_tokens or 0), "prompt_tokens": int(prompt_tokens or 0),
        "latency_s": float(latency or 0.0), "error": error,
        "truncated": bool(truncated) if text is not None else None, "frames_sent": frames_sent,
        "timestamps_mode": t.timestamps_mode, "raw_text": raw_text, "reasoning_tokens": reasoning_tokens,
        "frames_seen": frames_seen,
    }


def task_ledger(task: CaptionTask, frames, processor: dict | None = None,
                digests: list[str] | None = None) -> str | None:
    """The `frames_seen` text of a task's caption (capeval.engine.frames.ledger): the frames given, their decode's
    record in the frame cache, and what the backend reported handing its processor. None when it cannot be made
    (the caption row is kept either way). `digests`: the frames' `ledger.frame_digests`, when already taken."""
    from capeval.engine.frames import cache, ledger  # deferred: PyAV (capeval.engine.frames loads the decoder)

    try:
        meta = cache.frames_meta(task.frames_path)
    except (OSError, ValueError):
        meta = None
    try:
        return ledger.ledger_text(ledger.frames_seen(frames, task.timestamps, task.frame_spec, meta=meta,
                                                     media_type=task.media_type, processor=processor,
                                                     digests=digests))
    except (ValueError, TypeError, AttributeError):  # a malformed backend report or frames: no ledger, no failure
        return None


def freeze_heap() -> None:
    """Move everything the actor has made so far (the captioner's model, processor, the imports) out of the
    garbage collector's reach, as vLLM's engine does with its start-up heap (`gc.freeze`): the collector's oldest
    generation then holds only what the stage's work makes, and its full collections, which took 0.2-0.8 s in a
    caption actor with a vLLM captioner loaded (every few seconds of work), take a few milliseconds. The start-up
    objects live as long as the actor anyway."""
    import gc

    gc.collect()
    gc.freeze()


def _drive(coro):
    """Run a coroutine that never suspends (the sync paths below) to its result, without an event loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a sync caption path suspended")


class CaptionWorker:
    def __init__(self, captioner: str, params: dict):
        from capeval.engine.registry import lookup

        self.name = captioner
        self.model = lookup("captioner", captioner)(**params)
        self.reasoning_tags = tags_of(self.model)
        # the frame cache's readers load with the captioner, not on the first task's clock
        from capeval.engine.frames import cache, shards  # noqa: F401  # deferred: PyAV, pyarrow (~0.5 s busy)
        freeze_heap()

    # -- how many calls the stage keeps outstanding here ------------------------------------------------------------
    @cached_property
    def capabilities(self) -> CaptionerCapabilities:
        return captioner_capabilities(self.model)

    @property
    def streaming(self) -> bool:
        return self.capabilities.streaming

    def _threads(self) -> int:
        if not self.capabilities.thread_safe:
            return 1
        return self.capabilities.max_in_flight or SYNC_THREADS

    def window(self) -> int:
        if self.streaming:
            return self.capabilities.max_in_flight or SYNC_THREADS
        return self._threads() + 1  # one queued behind the busy threads: no idle gap between requests

    def queue_ahead(self) -> int:
        """Calls the stage may send beyond the window, which a streaming captioner queues itself (its `queue_ahead`)."""
        return self.capabilities.queue_ahead if self.streaming else 0

    def info(self) -> dict:
        """Called once the actor is up (its model loaded): pid, window and how it runs requests."""
        return {"pid": os.getpid(), "window": self.window(), "queue_ahead": self.queue_ahead(),
                "streaming": self.streaming}

    def pid(self) -> int:
        return os.getpid()

    def no_more_tasks(self) -> None:
        """The stage has sent this actor its last task (until a retry): a captioner that can use the idle slots of
        its window while the last requests drain (tail hedging, the HTTP captioner's `hedge` option) is told so."""
        tell = getattr(self.model, "no_more_requests", None)
        if tell is not None:
            tell()

    def counters(self) -> dict:
        """The captioner's own counts for the stage's record: hedge copies sent (`hedged_requests`), when it hedges,
        and an in-process engine's steps (`engine_counters`: engine_steps, in_engine_step_s), when it has one."""
        engine = getattr(self.model, "engine_counters", None)
        return {"hedged_requests": int(getattr(self.model, "hedged_requests", 0) or 0), **(engine() if engine else {})}

    def _reasoning_tags(self):
        if "reasoning_tags" not in self.__dict__:  # a worker made without __init__ (tests drive one so)
            self.reasoning_tags = tags_of(self.model)
        return self.reasoning_tags

    def _executor(self) -> ThreadPoolExecutor:
        pool = getattr(self, "_pool", None)
        if pool is None:
            pool = self._pool = ThreadPoolExecutor(self._threads(), thread_name_prefix="capeval-caption")
        return pool

    # -- one request ------------------------------------------------------------------------------------------------
    async def _one(self, request, sync: bool):
        from capeval.adapters.base import CaptionResponse

        try:
            if sync:
                (r,) = self.model.caption([request])
            elif self.streaming:
                r = await self.model.acaption(request)
            else:
                loop = asyncio.get_running_loop()
                (r,) = await loop.run_in_executor(self._executor(), self.model.caption, [request])
        except Exception as exc:  # noqa: BLE001 - this request failed; the others go on
            detail = str(exc).splitlines()[-1] if str(exc) else ""
            return CaptionResponse(request.key, None, f"captioner raised: {type(exc).__name__}: {detail}")
        return strip_caption(r, self._reasoning_tags())

    def _request(self, task: CaptionTask, frames, encoded, *, key=None, context=None, idx=None):
        from capeval.adapters.base import CaptionRequest

        image = task.media_type == "image"
        ts = () if image else task.timestamps
        if idx is not None:
            ts = tuple(ts[k] for k in idx) if ts else ()
            frames = frames[idx]
            encoded = tuple(encoded[k] for k in idx) if encoded is not None and len(encoded) > max(idx) else None
        text = task.prompt_text if image else prompt_with_timestamps(task.prompt_text, ts, task.timestamps_mode)
        return CaptionRequest(key or task.caption_key, text, frames, ts, max_tokens=task.max_tokens,
                              context=context, media_type=task.media_type, encoded_frames=encoded,
                              system=task.system, question=json.loads(task.question) if task.question else None)

    async def _caption(self, task: CaptionTask, frames, encoded, sync: bool) -> dict:
        if task.segments:
            return await self._asegmental(task, frames, encoded, sync)
        digests = None
        if sync:
            r = await self._one(self._request(task, frames, encoded), sync)
        else:
            from capeval.engine.frames.ledger import frame_digests  # deferred: PyAV (capeval.engine.frames loads the decoder)

            # the ledger's digests are taken while the request is at the backend, so they do not wait behind its
            # answer (a batch of answers arriving at once would hash one after another); here, not on a worker
            # thread: handing each task's hashing to a thread and its result back cost more than the hashing
            answering = asyncio.ensure_future(self._one(self._request(task, frames, encoded), sync))
            await asyncio.sleep(0)  # the request goes to the backend first
            digests = frame_digests(frames)
            r = await answering
        return row(task, self.name, r.text, r.error, r.n_tokens, r.prompt_tokens, r.latency_s,
                   truncated=r.truncated, frames_sent=r.frames_sent, **caption_row_fields(r),
                   frames_seen=(task_ledger(task, frames, getattr(r, "processor_inputs", None), digests)
                                if r.text is not None else None))

    async def caption_one(self, task: CaptionTask) -> dict:
        """The caption row of one task (errors as the row's `error`, never raised)."""
        hit("caption_call")  # a fault drill's actor death (engine/faultpoints.py)
        try:
            frames, encoded = load_task_frames(task)
        except Exception as exc:  # noqa: BLE001 - its frames file vanished or is unreadable: this row fails
            return row(task, self.name, None, f"frames unreadable: {type(exc).__name__}: {exc}", 0, 0, 0.0)
        return await self._caption(task, frames, encoded, sync=False)

    async def caption_group(self, tasks: list[CaptionTask]):
        """Many tasks in one call (the stage's: every task its free slots can take at once): each starts at once, as
        that many `caption_one` calls would, and the rows are yielded as they finish, the rows finishing together in
        one list (an async generator: the stage calls it as a Ray streaming generator). One call instead of one per
        task spares the actor Ray's dispatch and return of each (~0.5 ms of its event loop apiece, which an
        in-process engine filling up waits for: it shares the process's GIL). A task whose coroutine raises gets its
        own error row; the group goes on. A captioner that can use knowing how many requests a group brings (the
        in-process vLLM engine, which fills before its first step) is told first (`expect_requests`)."""
        expect = getattr(self.model, "expect_requests", None)
        if expect is not None and self.streaming:
            expect(len(tasks))  # each task's first request (a segmental task's later segments follow one by one)
        running = {asyncio.ensure_future(self._row_of(t)) for t in tasks}
        while running:
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            yield [d.result() for d in done]

    async def _row_of(self, task: CaptionTask) -> dict:
        try:
            return await self.caption_one(task)
        except Exception as exc:  # noqa: BLE001 - this task failed; its group goes on
            detail = str(exc).splitlines()[-1] if str(exc) else ""
            return row(task, self.name, None, f"captioner raised: {type(exc).__name__}: {detail}", 0, 0, 0.0)

    def caption(self, tasks: list[CaptionTask]) -> list[dict]:
        """The old batch call (a barrier: every plain task in one `caption(requests)` call); kept for backends
        driven without the stage and as the benchmark's baseline."""
        from capeval.adapters.base import CaptionResponse

        hit("caption_call")  # a fault drill's actor death (engine/faultpoints.py)
        loaded = {t.frames_path: load_task_frames(t) for t in tasks}
        plain = [t for t in tasks if not t.segments]
        requests = [self._request(t, *loaded[t.frames_path]) for t in plain]
        try:
            responses = self.model.caption(requests) if requests else []
        except Exception as exc:  # noqa: BLE001 - the whole batch failed, as one error per row
            responses = [CaptionResponse(r.key, None, f"captioner raised: {type(exc).__name__}: {exc}")
                         for r in requests]
        responses = [strip_caption(r, self._reasoning_tags()) for r in responses]
        out = [row(t, self.name, r.text, r.error, r.n_tokens, r.prompt_tokens, r.latency_s, truncated=r.truncated,
                   frames_sent=r.frames_sent, **caption_row_fields(r),
                   frames_seen=(task_ledger(t, loaded[t.frames_path][0], getattr(r, "processor_inputs", None))
                                if r.text is not None else None))
               for t, r in zip(plain, responses)]
        out += [self._segmental(t, loaded[t.frames_path][0], loaded[t.frames_path][1]) for t in tasks if t.segments]
        return out

    # -- segmental mode ---------------------------------------------------------------------------------------------
    def _segmental(self, task: CaptionTask, frames, encoded=None) -> dict:
        return _drive(self._asegmental(task, frames, encoded, sync=True))

    async def _asegmental(self, task: CaptionTask, frames, encoded, sync: bool) -> dict:
        """Each segment's caption is conditioned on the previous segments' captions, which the request carries once,
        in `CaptionRequest.context` (the backends put it before the prompt). Segments follow the frame spec when it
        has them (`segments:length=60,...` or scene cuts `segments:at=12.5|40,...`: `per` frames each); any other
        spec is split into `task.segments` equal parts. A task with `boundaries` (the video's own scene cuts) is
        split at them instead, whatever the spec."""
        import numpy as np

        texts: list[str] = []
        raws: list[str] = []  # whole replies, reasoning included (raw_text when any segment had reasoning)
        n_tokens = prompt_tokens = 0
        n_reasoning: int | None = None
        latency, truncated = 0.0, False
        reports: list[dict] = []  # each segment's processor report, kept in the ledger as "segments"
        for i, idx in enumerate(segment_chunks(task.frame_spec, len(frames), task.segments, task.timestamps,
                                                task.boundaries)):
            context = None
            if texts:
                context = "Captions of the previous segments of this video:\n" + "\n".join(
                    f"Segment {j + 1}: {t}" for j, t in enumerate(texts))
            req = self._request(task, frames, encoded, key=f"{task.caption_key}/{i}", context=context,
                                idx=np.asarray(idx))
            r = await self._one(req, sync)
            if r.text is None:
                return row(task, self.name, None, f"segment {i + 1}: {r.error}", n_tokens, prompt_tokens, latency)
            texts.append(r.text)
            reports.append(dict(getattr(r, "processor_inputs", None) or {}, frames=[int(k) for k in idx]))
            raws.append(getattr(r, "raw_text", None) or r.text)
            if getattr(r, "reasoning_tokens", None) is not None:
                n_reasoning = (n_reasoning or 0) + r.reasoning_tokens
            truncated = truncated or bool(r.truncated)
            n_tokens, prompt_tokens, latency = n_tokens + r.n_tokens, prompt_tokens + r.prompt_tokens, latency + r.latency_s
        text = "\n".join(f"Segment {j + 1}: {t}" for j, t in enumerate(texts))
        raw = "\n".join(f"Segment {j + 1}: {t}" for j, t in enumerate(raws)) if raws != texts else None
        return row(task, self.name, text, None, n_tokens, prompt_tokens, latency, truncated=truncated,
                   raw_text=raw, reasoning_tokens=n_reasoning,
                   frames_seen=task_ledger(task, frames, {"segments": reports}))

    def close(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
        self.model.close()
