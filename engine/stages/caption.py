"""The caption stage on Ray: caption actors (one per GPU; num_gpus=0 on CPU) sharded by request, each keeping a
bounded window of requests in flight, restarts of dead actors, retries of exactly the requests they lost, a progress
bar, and rows appended to a segment store as they finish. Only successful captions are stored (each key once);
failures are returned in the stage's counts (`failures`: caption_key -> error) for the sweep to account for, and a
rerun captions them again.

Why an explicit scheduler instead of ray.data: a captioner holds a model (minutes to load), so its actor must live
for the whole stage. Each actor is an async actor (engine/stages/caption_worker.py: `caption_one(task)` is a
coroutine); the driver keeps up to the actor's window of calls outstanding (the captioner's `max_in_flight`, or its
worker threads plus one for sync captioners) and submits the next task the moment one finishes: no batch barrier, so
one slow request holds one slot, not a batch. Tasks are pulled from the upstream iterator only when a slot frees up,
so decode runs ahead only as far as the window needs, and a task's frames are read inside the actor only when its
call starts. When an actor dies (OOM, segfault, os._exit), Ray restarts it (max_restarts) and every call that was in
flight fails with RayActorError: we re-queue exactly those tasks, up to `max_attempts` times each, then report
per-row errors instead of losing the rows. One death is counted once, however many calls it took with it; an actor
that has used up its restarts is replaced by a fresh one. A model is loaded before work starts and that time is shown
apart (the bar's rate and ETA count work only).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Iterable, Iterator

import pyarrow as pa

from engine.keys import content_key
from engine.schemas import CAPTIONS, conform
from engine.stages.caption_worker import (TIMESTAMP_MODES, CaptionTask, CaptionWorker,  # noqa: F401 (re-exported)
                                          prompt_with_timestamps, row)


def caption_key(frames_key: str, captioner: str, revision: str, prompt_text: str, params: dict) -> str:
    """Key of one caption: the frames, the captioner's identity and weights, the exact prompt and the params."""
    return content_key("caption", frames_key, captioner, revision, prompt_text, params)


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


class _VideoCount:
    """Videos finished, for the bar: a video is done when every task pulled for it has finished and the upstream
    iterator has moved past it (a video's tasks are yielded one after another)."""

    def __init__(self):
        self.open: dict[str, int] = {}  # video -> its tasks pulled and not finished yet
        self.current: str | None = None

    def pulled(self, video: str) -> int:
        done = 0
        if video != self.current:
            if self.current is not None and self.open.get(self.current) == 0:
                del self.open[self.current]
                done = 1
            self.current = video
        self.open[video] = self.open.get(video, 0) + 1
        return done

    def finished(self, video: str) -> int:
        self.open[video] -= 1
        if self.open[video] == 0 and video != self.current:
            del self.open[video]
            return 1
        return 0

    def exhausted(self) -> int:
        if self.current is not None and self.open.get(self.current) == 0:
            del self.open[self.current]
            self.current = None
            return 1
        self.current = None
        return 0


def run_caption_stage(
    tasks: Iterable[CaptionTask],
    *,
    captioner: str,
    params: dict | None = None,
    store,
    n_videos: int | None = None,
    num_actors: int = 1,
    gpus_per_actor: float = 0.0,
    max_in_flight: int | None = None,
    max_restarts: int = 3,
    max_attempts: int = 3,
    progress: bool = True,
    exit_once_marker: str | None = None,
    on_rows=None,
    batch_size: int | None = None,
) -> dict:
    """Caption every task not already in `store` (by caption_key) and append rows as captions finish.

    Returns counts: {"captioned", "cached", "failed", "retried", "actor_deaths", "load_s", "work_s"} and `failures`
    ({caption_key: error} of the captions that failed; they are not stored, so a rerun retries them). Tasks are
    pulled from the iterator lazily, so an upstream generator (e.g. the decode stage) is throttled by captioning
    speed. A key that appears twice (videos with identical frames) is captioned once. `max_in_flight` caps each
    actor's window (None: the captioner's own). `on_rows(rows)` is called with every group of finished rows
    (failures included) once the good ones are stored. `batch_size` is accepted for old callers and means nothing:
    requests are never batched behind each other.
    """
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    from engine.stages.progress import Bar, note
    from engine.sweep.faultpoints import hit

    del batch_size  # no meaning left: see the docstring
    params = dict(params or {})
    done = finished_keys(store)
    stats: dict = {"captioned": 0, "cached": 0, "failed": 0, "retried": 0, "actor_deaths": 0}
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
        max_task_retries=0,  # we re-queue lost calls ourselves, so we know which rows were lost
    )

    def new_actor():
        return actor_cls.remote(captioner, params, exit_once_marker)

    pending = fresh()
    first = next(pending, None)  # nothing to caption: no actor, no model load
    if first is None:
        stats.update(load_s=0.0, work_s=0.0, failures=failures)
        return stats
    t_load = time.perf_counter()
    note(f"caption [{captioner}]: loading the captioner ({max(1, num_actors)} actor(s))...", progress)
    actors = [new_actor() for _ in range(max(1, num_actors))]
    infos = ray.get([a.info.remote() for a in actors])
    windows = [min(i["window"], max_in_flight) if max_in_flight else i["window"] for i in infos]
    stats["load_s"] = round(time.perf_counter() - t_load, 3)
    note(f"caption [{captioner}]: loaded in {stats['load_s']:.1f} s; up to {sum(windows)} requests in flight",
         progress)
    t_work = time.perf_counter()
    epoch = [0] * len(actors)  # incarnation of each actor slot: a death is counted once per incarnation
    deaths = [0] * len(actors)
    busy = [0] * len(actors)
    retry: deque[tuple[CaptionTask, int]] = deque()
    inflight: dict = {}  # ObjectRef -> (actor index, epoch, task, attempt)
    videos = _VideoCount()
    bar = Bar(n_videos or 0, f"caption [{captioner}]", "video", progress)
    pending = itertools.chain([first], pending)
    exhausted = False

    def take() -> tuple[CaptionTask, int] | None:
        nonlocal exhausted
        if retry:
            return retry.popleft()
        if exhausted:
            return None
        t = next(pending, None)
        if t is None:
            exhausted = True
            bar.update(videos.exhausted())
            return None
        bar.update(videos.pulled(t.video_id))
        return t, 1

    def finish(t: CaptionTask, r: dict, out: list) -> None:
        out.append(r)
        bar.update(videos.finished(t.video_id))

    try:
        while True:
            # Fill free slots: retries first, then new tasks from upstream (backpressure: never more).
            for ai in range(len(actors)):
                while busy[ai] < windows[ai]:
                    nxt = take()
                    if nxt is None:
                        break
                    t, attempt = nxt
                    inflight[actors[ai].caption_one.remote(t)] = (ai, epoch[ai], t, attempt)
                    busy[ai] += 1
            if not inflight:
                break
            refs = list(inflight)
            ready, rest = ray.wait(refs, num_returns=1)
            if rest:
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                ready += more
            rows: list[dict] = []
            for ref in ready:
                ai, ep, t, attempt = inflight.pop(ref)
                busy[ai] -= 1
                try:
                    r = ray.get(ref)
                except RayActorError:
                    if ep == epoch[ai]:  # the first lost call of this incarnation: one death
                        stats["actor_deaths"] += 1
                        deaths[ai] += 1
                        epoch[ai] += 1
                        if deaths[ai] > max_restarts:  # Ray will not restart it again: replace it
                            actors[ai], deaths[ai] = new_actor(), 0
                    if attempt < max_attempts:
                        stats["retried"] += 1
                        bar.set_retries(stats["retried"])
                        retry.append((t, attempt + 1))
                        continue
                    r = row(t, captioner, None, f"caption actor died {attempt} times", 0, 0, 0.0)
                except RayTaskError as exc:  # the call raised inside a live actor: this row failed, the rest go on
                    cause = str(exc.cause if getattr(exc, "cause", None) is not None else exc).splitlines()[-1]
                    r = row(t, captioner, None, f"captioner raised: {cause}", 0, 0, 0.0)
                finish(t, r, rows)
            if not rows:
                continue
            good = [r for r in rows if r["error"] is None]
            if good:
                store.append(pa.Table.from_pylist(good, schema=CAPTIONS))
            if on_rows is not None:
                on_rows(rows)
            for r in rows:
                if r["error"] is not None:
                    failures[r["caption_key"]] = r["error"]
                stats["failed" if r["error"] else "captioned"] += 1
            hit("caption")
    finally:
        bar.close()
        for a in actors:
            try:
                ray.kill(a)
            except Exception:  # already dead
                pass
    stats["work_s"] = round(time.perf_counter() - t_work, 3)
    stats["failures"] = failures
    return stats
