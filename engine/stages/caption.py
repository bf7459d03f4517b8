"""The caption stage on Ray: caption actors (one per GPU; num_gpus=0 on CPU) sharded by video, with backpressure,
restarts of dead actors, retries of their unfinished videos, a progress bar, and rows appended to a segment store
as they finish. Only successful captions are stored (each key once); failures are returned in the stage's counts
(`failures`: caption_key -> error) for the sweep to account for, and a rerun captions them again.

Why an explicit scheduler instead of ray.data: a captioner holds a model (minutes to load), so its actor must live
for the whole stage and see whole videos; we keep at most `inflight_per_actor` batches queued per actor (pulling new
tasks from the upstream iterator only when a slot frees up, so decode never runs far ahead of captioning) and do our
own bookkeeping of which batch went to which actor. When an actor dies (OOM, segfault, os._exit), Ray restarts it
(max_restarts) and the calls that were in flight fail with RayActorError: we re-queue exactly those batches, up to
`max_attempts` times, then report per-row errors instead of losing the rows. A batch whose call raised (the
captioner raised, its frames file vanished) is reported the same way. An actor that has used up its restarts is
replaced by a fresh one.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa

from engine.keys import content_key
from engine.schemas import CAPTIONS, conform


def caption_key(frames_key: str, captioner: str, revision: str, prompt_text: str, params: dict) -> str:
    """Key of one caption: the frames, the captioner's identity and weights, the exact prompt and the params."""
    return content_key("caption", frames_key, captioner, revision, prompt_text, params)


@dataclass(frozen=True)
class CaptionTask:
    caption_key: str
    video_id: str
    frames_path: str  # .npy of uint8 (T, H, W, 3), from the decode stage
    timestamps: tuple[float, ...]
    frame_spec: str
    prompt_id: str
    prompt_text: str
    segments: int = 0  # >0: LVCap segmental mode, captioned in this many consecutive segments with context
    max_tokens: int = 512
    media_type: str = "video"  # "image": the frames are one still image, sent as an image


class CaptionWorker:
    """What runs inside each caption actor: the captioner and the per-batch logic (also usable without Ray)."""

    def __init__(self, captioner: str, params: dict, exit_once_marker: str | None = None):
        from engine.registry import lookup

        if captioner == "vllm":
            import adapters.vllm_captioner  # noqa: F401  (registers "vllm"; not among the registry's builtins)
        self.name = captioner
        self.model = lookup("captioner", captioner)(**params)
        # Fault injection for tests and chaos drills: exit the process (a real death, not an exception) once.
        self.exit_once_marker = exit_once_marker

    def pid(self) -> int:
        return os.getpid()

    def caption(self, tasks: list[CaptionTask]) -> list[dict]:
        if self.exit_once_marker and os.path.exists(self.exit_once_marker):
            os.remove(self.exit_once_marker)
            os._exit(17)
        import numpy as np

        from adapters.base import CaptionRequest

        rows = []
        plain = [t for t in tasks if not t.segments]
        frames = {t.frames_path: np.load(t.frames_path) for t in tasks}
        requests = [
            CaptionRequest(t.caption_key, t.prompt_text, frames[t.frames_path],
                           () if t.media_type == "image" else t.timestamps, max_tokens=t.max_tokens,
                           media_type=t.media_type)
            for t in plain
        ]
        responses = self.model.caption(requests) if requests else []
        for t, r in zip(plain, responses):
            rows.append(_row(t, self.name, r.text, r.error, r.n_tokens, r.prompt_tokens, r.latency_s,
                             truncated=r.truncated, frames_sent=r.frames_sent))
        for t in tasks:
            if t.segments:
                rows.append(self._segmental(t, frames[t.frames_path]))
        return rows

    def _segmental(self, task: CaptionTask, frames) -> dict:
        """LVCap segmental mode: each segment's caption is conditioned on the previous segments' captions, which the
        request carries once, in `CaptionRequest.context` (the backends put it before the prompt). Segments follow
        the frame spec when it has them (`segments:length=60,...` or scene cuts `segments:at=12.5|40,...`: `per`
        frames each); any other spec is split into `task.segments` equal parts."""
        import numpy as np

        from adapters.base import CaptionRequest

        texts: list[str] = []
        n_tokens = prompt_tokens = 0
        latency, truncated = 0.0, False
        for i, idx in enumerate(segment_chunks(task.frame_spec, len(frames), task.segments, task.timestamps)):
            context = None
            if texts:
                context = "Captions of the previous segments of this video:\n" + "\n".join(
                    f"Segment {j + 1}: {t}" for j, t in enumerate(texts))
            ts = tuple(task.timestamps[k] for k in idx) if task.timestamps else ()
            req = CaptionRequest(f"{task.caption_key}/{i}", task.prompt_text, frames[np.asarray(idx)], ts,
                                 max_tokens=task.max_tokens, context=context)
            (r,) = self.model.caption([req])
            if r.text is None:
                return _row(task, self.name, None, f"segment {i + 1}: {r.error}", n_tokens, prompt_tokens, latency)
            texts.append(r.text)
            truncated = truncated or bool(r.truncated)
            n_tokens, prompt_tokens, latency = n_tokens + r.n_tokens, prompt_tokens + r.prompt_tokens, latency + r.latency_s
        text = "\n".join(f"Segment {j + 1}: {t}" for j, t in enumerate(texts))
        return _row(task, self.name, text, None, n_tokens, prompt_tokens, latency, truncated=truncated)

    def close(self) -> None:
        self.model.close()


def segment_chunks(frame_spec: str, n_frames: int, n_segments: int, timestamps=()) -> list[list[int]]:
    """Frame indices of each captioning segment: the frame spec's own segments when it is a `segments:` spec (by
    each frame's timestamp against the segment edges; `per` consecutive frames when timestamps are unknown), else
    `n_segments` equal parts."""
    import numpy as np

    from engine.frames.sampling import KeyframeSnap, Segments, parse_frame_spec

    spec = parse_frame_spec(frame_spec)
    if isinstance(spec, KeyframeSnap):
        spec = spec.spec
    idx = np.arange(n_frames)
    if isinstance(spec, Segments):
        if len(timestamps) == n_frames and n_frames:
            ts = np.asarray(timestamps, dtype=float)
            seg = (np.floor(ts / spec.length_s) if spec.length_s else
                   np.searchsorted(np.asarray(spec.boundaries, dtype=float), ts, side="right"))
            return [idx[seg == s].tolist() for s in np.unique(seg)]
        return [idx[i:i + spec.per_segment].tolist() for i in range(0, n_frames, spec.per_segment)]
    return [part.tolist() for part in np.array_split(idx, max(1, min(n_segments, n_frames)))]


def _row(t: CaptionTask, captioner: str, text, error, n_tokens, prompt_tokens, latency, *, truncated: bool = False,
         frames_sent: int | None = None) -> dict:
    return {
        "caption_key": t.caption_key, "captioner": captioner, "prompt_id": t.prompt_id, "frame_spec": t.frame_spec,
        "video_id": t.video_id, "text": text, "n_tokens": int(n_tokens or 0), "prompt_tokens": int(prompt_tokens or 0),
        "latency_s": float(latency or 0.0), "error": error,
        "truncated": bool(truncated) if text is not None else None, "frames_sent": frames_sent,
    }


def finished_keys(store) -> set[str]:
    """Caption keys already stored without an error (rows with errors are retried by the next run)."""
    if not store.segments():
        return set()
    t = store.read(columns=["caption_key", "error"])
    return {k for k, e in zip(t.column("caption_key").to_pylist(), t.column("error").to_pylist()) if e is None}


def read_captions(store, keys: Iterable[str] | None = None) -> pa.Table:
    """Stored captions, one row per key (a successful row wins over an earlier failed one)."""
    import pyarrow.compute as pc

    t = store.read()
    if t.num_rows == 0:
        return CAPTIONS.empty_table()
    if keys is not None:
        t = t.filter(pc.is_in(t.column("caption_key"), value_set=pa.array(list(set(keys)), pa.string())))
    ok = t.filter(pc.is_null(t.column("error")))
    failed = t.filter(pc.invert(pc.is_in(t.column("caption_key"), value_set=ok.column("caption_key"))))
    from engine.store.segments import _first_per_key

    parts = [x for x in (ok, failed) if x.num_rows]
    if not parts:
        return CAPTIONS.empty_table()
    # conform, not cast: segments written before a column was added read back without it (filled with nulls)
    return conform(_first_per_key(pa.concat_tables(parts, promote_options="permissive"), "caption_key"), CAPTIONS)


def _batches_by_video(tasks: Iterator[CaptionTask], batch_size: int) -> Iterator[list[CaptionTask]]:
    """Group consecutive tasks into batches of whole videos (a video's tasks never straddle two actors)."""
    batch: list[CaptionTask] = []
    videos: set[str] = set()
    for t in tasks:
        if t.video_id not in videos and len(videos) >= batch_size:
            yield batch
            batch, videos = [], set()
        batch.append(t)
        videos.add(t.video_id)
    if batch:
        yield batch


def run_caption_stage(
    tasks: Iterable[CaptionTask],
    *,
    captioner: str,
    params: dict | None = None,
    store,
    n_videos: int | None = None,
    num_actors: int = 1,
    gpus_per_actor: float = 0.0,
    batch_size: int = 4,
    inflight_per_actor: int = 2,
    max_restarts: int = 3,
    max_attempts: int = 3,
    progress: bool = True,
    exit_once_marker: str | None = None,
    on_rows=None,
) -> dict:
    """Caption every task not already in `store` (by caption_key) and append rows as batches finish.

    Returns counts: {"captioned", "cached", "failed", "retried_batches", "actor_deaths"} and `failures`
    ({caption_key: error} of the captions that failed; they are not stored, so a rerun retries them). Tasks are
    pulled from the iterator lazily, so an upstream generator (e.g. the decode stage) is throttled by captioning
    speed. A key that appears twice (videos with identical frames) is captioned once. `on_rows(rows)` is called
    with every finished batch's rows (failures included) once the good ones are stored.
    """
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    from engine.stages.progress import Bar
    from engine.sweep.faultpoints import hit

    params = dict(params or {})
    done = finished_keys(store)
    stats: dict = {"captioned": 0, "cached": 0, "failed": 0, "retried_batches": 0, "actor_deaths": 0}
    failures: dict[str, str] = {}
    seen: set[str] = set()

    def fresh() -> Iterator[CaptionTask]:
        for t in tasks:
            if t.caption_key in done or t.caption_key in seen:
                stats["cached"] += 1
                continue
            seen.add(t.caption_key)
            yield t

    actor_cls = ray.remote(CaptionWorker).options(
        num_cpus=0 if gpus_per_actor else 1, num_gpus=gpus_per_actor, max_restarts=max_restarts,
        max_task_retries=0,  # we re-queue failed batches ourselves, so we know which rows were lost
    )

    def new_actor():
        return actor_cls.remote(captioner, params, exit_once_marker)

    actors = [new_actor() for _ in range(max(1, num_actors))]
    deaths = [0] * len(actors)
    pending = _batches_by_video(fresh(), batch_size)
    retry: deque[tuple[list[CaptionTask], int]] = deque()
    inflight: dict = {}  # ObjectRef -> (actor index, batch, attempt)
    bar = Bar(n_videos or 0, f"caption [{captioner}]", "video", progress)
    exhausted = False
    try:
        while True:
            # Fill free actor slots: retries first, then new batches from upstream (backpressure: never more).
            for ai in range(len(actors)):
                while sum(1 for v in inflight.values() if v[0] == ai) < inflight_per_actor:
                    if retry:
                        batch, attempt = retry.popleft()
                    elif not exhausted:
                        batch = next(pending, None)
                        if batch is None:
                            exhausted = True
                            break
                        attempt = 1
                    else:
                        break
                    inflight[actors[ai].caption.remote(batch)] = (ai, batch, attempt)
            if not inflight:
                break
            ready, _ = ray.wait(list(inflight), num_returns=1)
            ref = ready[0]
            ai, batch, attempt = inflight.pop(ref)
            try:
                rows = ray.get(ref)
            except RayActorError:
                stats["actor_deaths"] += 1
                deaths[ai] += 1
                if deaths[ai] > max_restarts:  # Ray will not restart it again: replace it (own bookkeeping)
                    actors[ai], deaths[ai] = new_actor(), 0
                if attempt < max_attempts:
                    stats["retried_batches"] += 1
                    retry.append((batch, attempt + 1))
                    continue
                rows = [_row(t, captioner, None, f"caption actor died {attempt} times", 0, 0, 0.0) for t in batch]
            except RayTaskError as exc:  # the call raised inside a live actor: these rows failed, the rest go on
                cause = str(exc.cause if getattr(exc, "cause", None) is not None else exc).splitlines()[-1]
                rows = [_row(t, captioner, None, f"captioner raised: {cause}", 0, 0, 0.0) for t in batch]
            good = [r for r in rows if r["error"] is None]
            store.append(pa.Table.from_pylist(good, schema=CAPTIONS))
            if on_rows is not None:
                on_rows(rows)
            for r in rows:
                if r["error"] is not None:
                    failures[r["caption_key"]] = r["error"]
                stats["failed" if r["error"] else "captioned"] += 1
            bar.update(len({t.video_id for t in batch}))
            hit("caption")
    finally:
        bar.close()
        for a in actors:
            try:
                ray.kill(a)
            except Exception:  # already dead
                pass
    stats["failures"] = failures
    return stats

