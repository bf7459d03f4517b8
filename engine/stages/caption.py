"""The caption stage on Ray: caption actors (one per GPU; num_gpus=0 on CPU) sharded by request, each keeping a
bounded window of requests in flight, restarts of dead actors, retries of exactly the requests they lost, a progress
bar, and rows appended to a segment store as they finish. Only successful captions are stored (each key once);
failures are returned in the stage's counts (`failures`: caption_key -> error) for the sweep to account for, and a
rerun captions them again.

Why an explicit scheduler instead of ray.data: a captioner holds a model (minutes to load), so its actor must live
for the whole stage. Each actor is an async actor (engine/stages/caption_worker.py); the driver keeps up to the
actor's window of tasks outstanding (the captioner's `max_in_flight`, or its worker threads plus one for sync
captioners) and hands it the tasks its free slots take in one call (`caption_group(tasks)`, a Ray streaming
generator: every task starts at once and the rows come back as they finish, those finishing together in one message),
so there is no batch barrier: one slow request holds one slot, not a batch, and each row frees its slot as it comes
back. One call per group rather than per task spares the actor Ray's dispatch and return of each task, time an
in-process engine (the vLLM captioner) waits for while it fills, since it shares the actor's GIL.
Tasks are pulled from the upstream iterator only when a slot frees up, so decode runs ahead only as far as the window
needs, and a task's frames are read inside the actor only when its call starts. When an actor dies (OOM, segfault,
os._exit), Ray restarts it (max_restarts) and every call that was in flight fails with RayActorError: we re-queue
exactly the tasks whose rows had not come back, up to `max_attempts` times each, then report per-row errors instead
of losing the rows. One death is counted once, however many calls it took with it; an actor that has used up its
restarts is replaced by a fresh one. A model is loaded before work starts and that time is shown
apart (the bar's rate and ETA count work only).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Iterable, Iterator

import pyarrow as pa

from capeval.adapters.base import captioner_capabilities
from capeval.engine.faultpoints import actor_env, hit
from capeval.engine.schemas import CAPTIONS, conform
from capeval.engine.stages.caption_worker import (TIMESTAMP_MODES, CaptionTask, CaptionWorker,  # noqa: F401 (re-exported)
                                          prompt_with_timestamps, row, segment_chunks)
from capeval.adapters.vllm_replicas import gpu_groups
from capeval.engine.ray_local import ray_usable
from capeval.engine.registry import lookup
from capeval.engine.stages.progress import Bar, note
from capeval.engine.store.segments import first_per_key


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
    parts = [x for x in (ok, failed) if x.num_rows]
    if not parts:
        return CAPTIONS.empty_table()
    # conform, not cast: segments written before a column was added read back without it (filled with nulls)
    return conform(first_per_key(pa.concat_tables(parts, promote_options="permissive"), "caption_key"), CAPTIONS)


def actor_cpus(captioner: str) -> float:
    """CPUs a caption actor reserves on a CPU node: the captioner class's `actor_cpus` (0 for HTTP captioners, whose
    server does the work: reserving a core for an actor that waits on sockets would leave the decode tasks one core
    fewer), else 1."""
    try:
        return captioner_capabilities(lookup("captioner", captioner)).actor_cpus
    except KeyError:  # unknown: the actor's constructor will say so
        return 1


def _cause(exc: Exception) -> str:
    return str(exc.cause if getattr(exc, "cause", None) is not None else exc).splitlines()[-1]


def _finish(t: CaptionTask, r: dict, rows: list, videos: "_VideoCount", bar) -> None:
    rows.append(r)
    bar.update(videos.finished(t.video_id))


def _settle(rows: list[dict], store, on_rows, stats: dict, failures: dict, label: str | None = None) -> None:
    """Store the good rows (named by `label` when given), tell `on_rows` about all of them, count them."""
    if label is not None:
        for r in rows:
            r["captioner"] = label
    good = [r for r in rows if r["error"] is None]
    if good:
        store.append(pa.Table.from_pylist(good, schema=CAPTIONS))
    if on_rows is not None:
        on_rows(rows)
    for r in rows:
        if r["error"] is not None:
            failures[r["caption_key"]] = r["error"]
        stats["failed" if r["error"] else "captioned"] += 1


PROBES = 3  # failed probes in a row before a restarting actor counts as gone


class _Actors:
    """The caption actors: each slot's window, calls outstanding and incarnation (`epoch`). When a call is lost to
    a death, the slot takes no new calls and a probe (`info`) waits for Ray to restart the actor; the calls lost
    with the same incarnation count as one death. An actor Ray will not restart again is replaced by a fresh one,
    at most `max_restarts + 1` times per slot; after that the slot is gone (its lost calls were counted already).
    """

    def __init__(self, make, n: int, max_restarts: int):
        self.make, self.max_restarts = make, max_restarts
        self.handles = [make() for _ in range(n)]
        self.windows, self.busy, self.epoch, self.replaced = [0] * n, [0] * n, [0] * n, [0] * n
        self.calls = [0] * n  # calls kept outstanding per actor: its window and what its captioner queues ahead
        self.down, self.gone, self.failed_probes = [False] * n, [False] * n, [0] * n
        self.probes: dict = {}  # ObjectRef of an `info` call -> slot
        self.told: list[int | None] = [None] * n  # the incarnation last told it has had its last task
        self.notices: list = []  # ObjectRefs of those notices (fetched at the end, so no error goes unseen)

    def no_more_tasks(self) -> None:
        """Tell each live actor, once per incarnation, that it has had its last task (its captioner may then hedge
        the requests still running: engine/stages/caption_worker.py `no_more_tasks`)."""
        for ai, handle in enumerate(self.handles):
            if self.told[ai] != self.epoch[ai] and not self.down[ai] and not self.gone[ai] and self.busy[ai]:
                self.told[ai] = self.epoch[ai]
                self.notices.append(handle.no_more_tasks.remote())

    def counters(self) -> dict:
        """The captioners' counts (caption_worker.CaptionWorker.counters) summed over the actors alive now: an
        actor that died took its counts with it."""
        import ray

        total: dict = {"hedged_requests": 0}
        refs = [h.counters.remote() for ai, h in enumerate(self.handles) if not self.down[ai] and not self.gone[ai]]
        for ref in refs + self.notices:
            try:
                got = ray.get(ref, timeout=10)
            except Exception:  # noqa: BLE001 - a dead or stuck actor: its counts are lost, the captions are not
                continue
            for k, v in (got or {}).items():
                total[k] = total.get(k, 0) + v
        return total

    def start(self, max_in_flight: int | None) -> None:
        import ray

        infos = ray.get([a.info.remote() for a in self.handles])
        self.windows = [min(i["window"], max_in_flight) if max_in_flight else i["window"] for i in infos]
        # calls beyond the window that the captioner queues itself (only when the window is its own: a smaller one
        # asked of the stage is not what the captioner holds back): each slot that frees starts the next request at
        # once, instead of waiting for the driver's round trip
        self.calls = [w + i.get("queue_ahead", 0) if w == i["window"] else w for w, i in zip(self.windows, infos)]

    def room(self, ai: int) -> int:
        return 0 if self.down[ai] or self.gone[ai] else self.calls[ai] - self.busy[ai]

    @property
    def all_gone(self) -> bool:
        return all(self.gone)

    def lost(self, ai: int, epoch: int) -> int:
        """A call of slot `ai` made in incarnation `epoch` was lost: 1 if that is news of a death, else 0."""
        if epoch != self.epoch[ai] or self.down[ai]:
            return 0
        self.down[ai] = True
        self.epoch[ai] += 1
        self.probes[self.handles[ai].info.remote()] = ai
        return 1

    def probe_done(self, ref) -> None:
        """The probe of a restarting actor came back: the slot works again, or (after PROBES failures in a row: a
        probe sent before Ray knew of the death can fail too) the actor is gone for good and is replaced."""
        import ray
        from ray.exceptions import RayActorError

        ai = self.probes.pop(ref)
        try:
            ray.get(ref)
        except RayActorError:
            self.failed_probes[ai] += 1
            if self.failed_probes[ai] >= PROBES:
                if self.replaced[ai] > self.max_restarts:
                    self.gone[ai] = True
                    return
                self.replaced[ai] += 1
                self.failed_probes[ai] = 0
                self.handles[ai] = self.make()
                self.epoch[ai] += 1
            self.probes[self.handles[ai].info.remote()] = ai
            return
        self.down[ai], self.failed_probes[ai] = False, 0

    def kill(self) -> None:
        import ray

        if not ray_usable():  # after a SIGTERM ray.kill may wait on a dead GCS; the watchdog ends the actors
            return
        for a in self.handles:
            try:
                ray.kill(a)
            except Exception:  # already dead
                pass


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
    on_rows=None,
    label: str | None = None,
) -> dict:
    """Caption every task not already in `store` (by caption_key) and append rows as captions finish.

    Returns counts: {"captioned", "cached", "failed", "retried", "actor_deaths", "hedged_requests", "load_s",
    "work_s"} and `failures` ({caption_key: error} of the captions that failed; they are not stored, so a rerun
    retries them). `hedged_requests`: the hedge copies the captioners sent once the last tasks were out (each actor
    is told when it has had its last task; counted over the actors alive at the end). Tasks are
    pulled from the iterator lazily, so an upstream generator (e.g. the decode stage) is throttled by captioning
    speed. A key that appears twice (videos with identical frames) is captioned once. `max_in_flight` caps each
    actor's window (None: the captioner's own). `on_rows(rows)` is called with every group of finished rows
    (failures included) once the good ones are stored. `label`: the captioner's identity in the rows' `captioner` column
    (a sweep file's `label`, which tells apart two entries of one backend; default: the registry name).
    """
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    params = dict(params or {})
    done = finished_keys(store)
    stats: dict = {"captioned": 0, "cached": 0, "failed": 0, "retried": 0, "actor_deaths": 0, "hedged_requests": 0}
    failures: dict[str, str] = {}
    seen: set[str] = set()

    def fresh() -> Iterator[CaptionTask]:
        for t in tasks:
            if t.caption_key in done or t.caption_key in seen:
                stats["cached"] += 1
                continue
            seen.add(t.caption_key)
            yield t

    num_actors, gpus_per_actor = gpu_groups(params, num_actors, gpus_per_actor,
                                          ray.cluster_resources().get("GPU") if gpus_per_actor else None)
    fault_env = actor_env()  # kill points inside the actors (engine/faultpoints.py), set only in fault drills
    actor_cls = ray.remote(CaptionWorker).options(
        num_cpus=0 if gpus_per_actor else actor_cpus(captioner), num_gpus=gpus_per_actor, max_restarts=max_restarts,
        max_task_retries=0,  # we re-queue lost calls ourselves, so we know which rows were lost
        **({"runtime_env": {"env_vars": fault_env}} if fault_env else {}),
    )

    def new_actor():
        return actor_cls.remote(captioner, params)

    pending = fresh()
    first = next(pending, None)  # nothing to caption: no actor, no model load
    if first is None:
        stats.update(load_s=0.0, work_s=0.0, failures=failures)
        return stats
    t_load = time.perf_counter()
    note(f"caption [{captioner}]: loading the captioner ({max(1, num_actors)} actor(s))...", progress)
    actors = _Actors(new_actor, max(1, num_actors), max_restarts)
    # pyarrow imports its pandas shim (~0.3 s) when it first builds a table from Python rows: here, while the
    # captioners load, rather than when the first captions are stored
    pa.Table.from_pylist([], schema=CAPTIONS)
    try:
        actors.start(max_in_flight)
    except (RayActorError, RayTaskError) as exc:  # the constructor failed: every task fails, saying why
        actors.kill()
        error = f"captioner could not start: {_cause(exc)}"
        rows = [row(t, captioner, None, error, 0, 0, 0.0) for t in itertools.chain([first], pending)]
        _settle(rows, store, on_rows, stats, failures, label)
        stats.update(load_s=round(time.perf_counter() - t_load, 3), work_s=0.0, failures=failures)
        return stats
    stats["load_s"] = round(time.perf_counter() - t_load, 3)
    queued = sum(actors.calls) - sum(actors.windows)
    note(f"caption [{captioner}]: loaded in {stats['load_s']:.1f} s; up to {sum(actors.windows)} requests in "
         f"flight" + (f" and {queued} queued behind them" if queued else ""), progress)
    t_work = time.perf_counter()
    retry: deque[tuple[CaptionTask, int]] = deque()
    inflight: dict = {}  # ObjectRefGenerator of a group call -> (actor index, epoch, {caption_key: (task, attempt)})
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

    try:
        while True:
            rows: list[dict] = []
            if actors.all_gone:  # no actor will come back: what is left fails, saying so
                lost = [t for t, _ in retry] + [t for _, _, group in inflight.values() for t, _ in group.values()]
                retry.clear()
                inflight.clear()
                while (nxt := take()) is not None:
                    lost.append(nxt[0])
                error = f"caption actors died more than {max_restarts} restarts allow"
                for t in lost:
                    _finish(t, row(t, captioner, None, error, 0, 0, 0.0), rows, videos, bar)
            # Fill free slots: retries first, then new tasks from upstream (backpressure: never more), all that one
            # actor's slots take in one call (its rows stream back as they finish)
            for ai in range(len(actors.handles)):
                group: dict[str, tuple[CaptionTask, int]] = {}
                while actors.room(ai) > len(group) and (nxt := take()) is not None:
                    group[nxt[0].caption_key] = nxt
                if group:
                    call = actors.handles[ai].caption_group.options(num_returns="streaming")
                    inflight[call.remote([t for t, _ in group.values()])] = (ai, actors.epoch[ai], group)
                    actors.busy[ai] += len(group)
            if exhausted and not retry:
                actors.no_more_tasks()
            waiting = list(inflight) + list(actors.probes)
            if not waiting and not rows:
                break
            ready = []
            if waiting:
                ready, rest = ray.wait(waiting, num_returns=1)
                if rest:
                    ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:
                if ref in actors.probes:
                    actors.probe_done(ref)
                    continue
                ai, ep, group = inflight[ref]
                try:
                    got = ray.get(next(ref))
                except StopIteration:  # the call ended: any task it gave no row for fails, saying so
                    got, error = [], "the caption call ended without this task's row"
                except RayActorError:
                    got, error = [], None
                    stats["actor_deaths"] += actors.lost(ai, ep)  # one death however many calls it took
                except RayTaskError as exc:  # the call raised inside a live actor: its rows still out failed
                    got, error = [], f"captioner raised: {_cause(exc)}"
                else:
                    error = ""
                for r in got:
                    t, _ = group.pop(r["caption_key"])
                    actors.busy[ai] -= 1
                    _finish(t, r, rows, videos, bar)
                if error == "" and group:
                    continue  # more rows to come
                del inflight[ref]
                actors.busy[ai] -= len(group)
                for t, attempt in group.values():
                    if error is None:  # lost with its actor
                        if attempt < max_attempts:
                            stats["retried"] += 1
                            bar.set_retries(stats["retried"])
                            retry.append((t, attempt + 1))
                            continue
                        r = row(t, captioner, None, f"caption actor died {attempt} times", 0, 0, 0.0)
                    else:
                        r = row(t, captioner, None, error, 0, 0, 0.0)
                    _finish(t, r, rows, videos, bar)
            if rows:
                _settle(rows, store, on_rows, stats, failures, label)
                for _ in rows:  # counted per caption stored: `caption@N` is the Nth caption however answers group
                    hit("caption")
        stats["work_s"] = round(time.perf_counter() - t_work, 3)
        stats.update(actors.counters())
    finally:
        bar.close()
        actors.kill()
    stats["failures"] = failures
    return stats
