"""The CPU decode stage on Ray: one task per video decodes every frame spec the sweep needs for it (through the
frame cache of engine.frames), with a bounded number of tasks in flight. (engine.frames.ray_decode.DecodePool maps
one spec over many videos and returns when all are done; captioning wants all specs of a video together, as soon as
that video is ready.)

`decode_stream` is a generator: it submits at most `max_inflight` videos ahead and yields each video's FRAMES rows
as soon as its task finishes. The caption stage pulls from it lazily, so decoding never runs more than
`max_inflight` videos ahead of captioning (backpressure) and frames of finished videos can be captioned while
others are still decoding.
"""

from __future__ import annotations

from typing import Iterator


def decode_video_specs(video_id: str, path: str, specs: list[str], cache_dir: str) -> list[dict]:
    """FRAMES rows (one per spec) of one video through engine.frames' cache; a bad video gives error rows."""
    from engine.frames.cache import frames_row

    return [frames_row(path, video_id, spec, None, cache_dir, threads=1) for spec in specs]


def decode_stream(videos: list[tuple[str, str]], specs: list[str], *, cache_dir: str,
                  max_inflight: int = 4) -> Iterator[list[dict]]:
    """Yield the FRAMES rows of each (video_id, path), all `specs` at once, as Ray decode tasks finish."""
    import ray

    remote = ray.remote(num_cpus=1, max_retries=2)(decode_video_specs)
    queue = list(videos)
    inflight: list = []
    while queue or inflight:
        while queue and len(inflight) < max_inflight:
            vid, path = queue.pop(0)
            inflight.append(remote.remote(vid, path, list(specs), cache_dir))
        ready, inflight = ray.wait(inflight, num_returns=1)
        yield ray.get(ready[0])
