"""The CPU decode stage on Ray: each task decodes every frame spec the sweep needs for a few distinct videos (up to
MAX_VIDEOS_PER_TASK: a Ray task's own cost is as large as a small clip's decode; one per task when the queue is
short), through the frame cache of capeval.engine.frames, with a bounded number of videos in flight and a progress bar.

`decode_stream` is a generator: it submits at most `max_inflight` videos ahead and yields each video's rows as soon
as its task finishes. The caption stage pulls from it lazily, so decoding never runs more than `max_inflight` videos
ahead of captioning (backpressure), and frames of finished videos are captioned while others still decode.

Videos with identical bytes are decoded once (content keys share work): files are grouped by size first (a stat),
and only files that share a size are hashed; each video id of a group still gets its own rows.

Every row says whether it failed and how (`failure`: an capeval.engine.sweep.accounting.Failure, or None): a file the
decoder rejects is `bad_media` (permanent); a frame cache that cannot be written (disk full) or read is `io_error`
(retryable, never a silent loss); a decode task lost with its worker is `frames_missing` (retryable).
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Iterator

from capeval.engine.frames.sampling import FrameSpec
from capeval.engine.sweep.accounting import BAD_MEDIA, FRAMES_MISSING, IO_ERROR, Failure


def decode_one(path: str, video_id: str, spec: FrameSpec, cache_dir: str, size=None,
               cap_bytes: int | None = None) -> dict:
    """One FRAMES row (+ `failure`) of one video and spec at `size` (capeval.engine.frames.sizes), through the frame
    cache (capped at `cap_bytes`)."""
    from capeval.engine.frames.cache import ensure_frames
    from capeval.engine.frames.decode import VideoDecodeError

    spec_text = str(spec)
    row = {"frames_key": "", "video_id": video_id, "frame_spec": spec_text, "timestamps": None, "height": None,
           "width": None, "path": None, "error": None, "failure": None}
    try:
        key, meta, loc, _ = ensure_frames(path, spec, size, cache_dir, threads=1, cap_bytes=cap_bytes)
        _, h, w, _ = meta["shape"]
        return {**row, "frames_key": key, "timestamps": [float(t) for t in meta["timestamps"]], "height": int(h),
                "width": int(w), "path": loc}
    except VideoDecodeError as exc:
        failure = Failure(BAD_MEDIA, f"bad media: {exc.kind}", f"bad media: {exc}")
    except OSError as exc:  # the frame cache (or the file system under it) refused: a rerun can succeed
        cause = _io_cause(exc, cache_dir)
        failure = Failure(IO_ERROR, f"frame cache I/O: {cause}",
                          f"frame cache I/O error for {path} under {cache_dir}: {cause} ({exc})")
    except Exception as exc:  # noqa: BLE001 - an unexpected decoder error: retry rather than call the media bad
        failure = Failure(FRAMES_MISSING, f"decode raised {type(exc).__name__}",
                          f"decode of {path} raised {type(exc).__name__}: {exc}")
    return {**row, "frames_key": f"failed:{video_id}:{spec_text}", "error": failure.message, "failure": failure}


def _io_cause(exc: OSError, cache_dir: str) -> str:
    """What went wrong in words; numpy reports a full disk as a short write without an errno."""
    import errno
    import shutil

    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    try:
        free = shutil.disk_usage(cache_dir).free
    except OSError:
        free = None
    if exc.errno is None and free is not None and free < 1 << 20:
        return f"no space left on the device ({free} bytes free)"
    return exc.strerror or type(exc).__name__


def decode_video_specs(video_id: str, path: str, specs: list[FrameSpec], cache_dir: str, size=None,
                       cap_bytes: int | None = None) -> list[dict]:
    return [decode_one(path, video_id, spec, cache_dir, size, cap_bytes) for spec in specs]


def decode_videos_specs(videos: list[tuple[str, str]], specs: list[FrameSpec], cache_dir: str, size=None,
                        cap_bytes: int | None = None) -> list[list[dict]]:
    """decode_video_specs of each (video_id, path), in one task: a Ray task costs ~1-2 ms of scheduling and
    serialization on each side, as much as decoding a small clip."""
    return [decode_video_specs(vid, path, specs, cache_dir, size, cap_bytes) for vid, path in videos]


#: videos per decode task at most; fewer when the queue is short (decode_stream: every CPU keeps work)
MAX_VIDEOS_PER_TASK = 4


def videos_per_task(n_videos: int, cpus: float) -> int:
    """Videos one decode task takes: up to MAX_VIDEOS_PER_TASK, while the queue still holds at least eight tasks per
    CPU (a short queue is spread one video per task over every CPU)."""
    return max(1, min(MAX_VIDEOS_PER_TASK, int(n_videos // max(1.0, 8 * cpus))))


def content_groups(videos: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """(video_id, path) grouped by identical bytes, in first-seen order. Only same-size files are hashed."""
    from capeval.engine.frames.cache import video_digest

    by_size: dict[object, list[tuple[str, str]]] = defaultdict(list)
    for vid, path in videos:
        try:
            by_size[os.stat(path).st_size].append((vid, path))
        except OSError:
            by_size[("unreadable", vid)].append((vid, path))  # decode will say why
    groups: dict[object, list[tuple[str, str]]] = {}
    for size, members in by_size.items():
        if len(members) == 1:
            groups[(size, members[0][0])] = members
            continue
        for vid, path in members:
            try:
                ident = (size, video_digest(path))
            except OSError:
                ident = ("unreadable", vid)
            groups.setdefault(ident, []).append((vid, path))
    order = {vid: i for i, (vid, _) in enumerate(videos)}
    return sorted(groups.values(), key=lambda g: order[g[0][0]])


def decode_stream(videos: list[tuple[str, str]], specs: list[str], *, cache_dir: str, max_inflight: int = 64,
                  progress: bool = False, desc: str = "decode", size="default",
                  cap_bytes: int | None = None) -> Iterator[list[dict]]:
    """Yield the rows of each (video_id, path), all `specs` at once at `size` (capeval.engine.frames.sizes; None is
    native, "default" the size for consumers of unknown family), as Ray decode tasks finish. `specs` are texts (the
    sweep's and the rows' identity), parsed here once for all videos. `cap_bytes`: the
    frame cache's cap (default capeval.engine.frames.shards.default_cap_bytes(), read here so all workers use one)."""
    import ray

    from capeval.engine.frames.shards import default_cap_bytes
    from capeval.engine.frames.sizes import DEFAULT_SIZE, parse_size
    from capeval.engine.stages.progress import Bar
    from capeval.engine.faultpoints import hit

    size = parse_size(DEFAULT_SIZE if size == "default" else size)
    parsed = [FrameSpec.parse(s) for s in specs]
    cap_bytes = default_cap_bytes() if cap_bytes is None else int(cap_bytes)

    remote = ray.remote(num_cpus=1, max_retries=2)(decode_videos_specs)
    queue = content_groups(videos)
    per_task = videos_per_task(len(queue), ray.cluster_resources().get("CPU", 1.0))
    queue.reverse()  # pop() from the end keeps the input order
    inflight: dict = {}  # ObjectRef -> the content groups its task decodes
    ahead = 0  # videos in the tasks in flight
    with Bar(len(videos), desc, "video", progress) as bar:
        while queue or inflight:
            while queue and ahead < max_inflight:
                groups = [queue.pop() for _ in range(min(per_task, len(queue), max_inflight - ahead))]
                inflight[remote.remote([g[0] for g in groups], parsed, cache_dir, size, cap_bytes)] = groups
                ahead += len(groups)
            ready, _ = ray.wait(list(inflight), num_returns=1)
            groups = inflight.pop(ready[0])
            ahead -= len(groups)
            try:
                decoded = ray.get(ready[0])
            except Exception as exc:  # noqa: BLE001 - the task's worker died past its retries
                failure = Failure(FRAMES_MISSING, "decode task lost", f"decode task lost: {type(exc).__name__}")
                decoded = [[{"frames_key": f"failed:{g[0][0]}:{s}", "video_id": g[0][0], "frame_spec": s,
                             "timestamps": None, "height": None, "width": None, "path": None,
                             "error": failure.message, "failure": failure} for s in specs] for g in groups]
            for group, rows in zip(groups, decoded):
                for vid, _ in group:
                    yield [{**r, "video_id": vid} for r in rows]
                    hit("decode")
                bar.update(len(group))
