"""Decode many videos on Ray CPU workers with bounded in-flight work; returns FRAMES rows.

Workers are actors (each keeps its own digest memo and warm imports) that write into the shared frame cache
and return only the small FRAMES row; frames travel through the cache files, not the object store. At most
`per_worker` calls are queued per actor, so a 100k-video list never floods the scheduler or the object store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import pyarrow as pa

from capeval.engine.frames.cache import frames_row, rows_to_table
from capeval.engine.frames.decode import Size
from capeval.engine.frames.sampling import FrameSpec

_WORKER_CLS = None


def _worker_class():
    global _WORKER_CLS
    if _WORKER_CLS is None:
        import ray

        @ray.remote(num_cpus=1)
        class FrameDecodeWorker:
            def ready(self) -> bool:
                return True

            def decode(self, path: str, video_id: str, spec: FrameSpec, size, cache_dir: str, threads) -> dict:
                return frames_row(path, video_id, spec, size, cache_dir, threads=threads)

        _WORKER_CLS = FrameDecodeWorker
    return _WORKER_CLS


class DecodePool:
    """A fixed set of decode actors. `threads` per decoder (1 scales by workers, not by codec threads)."""

    def __init__(self, num_workers: int = 2, *, threads: int | str = 1, per_worker: int = 2):
        import ray

        if not ray.is_initialized():
            raise RuntimeError("Ray is not initialised: call ray.init() (or use the cluster entry point) first")
        if num_workers < 1 or per_worker < 1:
            raise ValueError(f"num_workers and per_worker must be >= 1, got {num_workers}, {per_worker}")
        self.threads = threads
        self.per_worker = per_worker
        self.workers = [_worker_class().remote() for _ in range(num_workers)]
        ray.get([w.ready.remote() for w in self.workers])  # start-up is paid here, not inside map()

    def map(
        self, paths: Iterable[str | Path], spec: FrameSpec, size: Size = None,
        cache_dir: str | Path = ".capeval/frames", *, video_ids: Iterable[str] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[dict]:
        """FRAMES rows, in input order; error rows for bad videos (a worker crash also becomes an error row)."""
        import ray

        paths = [str(p) for p in paths]
        ids = [Path(p).stem for p in paths] if video_ids is None else [str(v) for v in video_ids]
        if len(ids) != len(paths):
            raise ValueError(f"{len(paths)} paths but {len(ids)} video_ids")
        spec_text = str(spec)
        cache_dir = str(Path(cache_dir).resolve())
        rows: list[dict | None] = [None] * len(paths)
        load = {i: 0 for i in range(len(self.workers))}
        pending: dict = {}  # ref -> (index, worker)
        nxt = done = 0
        while done < len(paths):
            while nxt < len(paths) and len(pending) < len(self.workers) * self.per_worker:
                w = min(load, key=load.get)  # least-loaded actor
                ref = self.workers[w].decode.remote(paths[nxt], ids[nxt], spec, size, cache_dir, self.threads)
                pending[ref] = (nxt, w)
                load[w] += 1
                nxt += 1
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i, w = pending.pop(ref)
                load[w] -= 1
                try:
                    rows[i] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a dead worker must not stop the other videos
                    rows[i] = frames_row_error(paths[i], ids[i], spec_text, size, f"worker failed: {exc}")
                done += 1
                if progress:
                    progress(done, len(paths))
        return rows  # type: ignore[return-value]

    def close(self) -> None:
        import ray

        from capeval.engine.ray_local import ray_usable

        if ray_usable():  # after a SIGTERM ray.kill may wait on a dead GCS; the watchdog ends the workers
            for w in self.workers:
                ray.kill(w)
        self.workers = []


def frames_row_error(path: str, video_id: str, spec_text: str, size: Size, message: str) -> dict:
    from capeval.engine.frames.decode import size_text
    from capeval.engine.keys import frames_key

    return {"frames_key": frames_key(f"path:{Path(path).resolve()}", spec_text, size_text(size)),
            "video_id": video_id, "frame_spec": spec_text, "timestamps": None, "height": None, "width": None,
            "path": None, "error": message}


def decode_videos_ray(
    paths: Iterable[str | Path], spec: FrameSpec, size: Size = None, cache_dir: str | Path = ".capeval/frames",
    *, video_ids: Iterable[str] | None = None, num_workers: int = 2, threads: int | str = 1,
    progress: Callable[[int, int], None] | None = None,
) -> pa.Table:
    """FRAMES table for `paths` decoded by `num_workers` Ray actors (Ray must be initialised)."""
    pool = DecodePool(num_workers, threads=threads)
    try:
        return rows_to_table(pool.map(paths, spec, size, cache_dir, video_ids=video_ids, progress=progress))
    finally:
        pool.close()
