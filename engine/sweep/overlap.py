"""Captioning and judging at once (issue 11): a cell's judging starts with its first captions.

Stage after stage, a sweep's judge idles while every caption is made, then its caption GPUs idle while it judges.
Here the caption stage runs on a background thread (`CaptionThread`: capeval.engine.sweep.captioning.caption_cells_for, with a
`CaptionWatch` that hears of every decoded frames row, frame failure and finished caption), while the judge loop runs
on the calling thread with a `CellFeed` as its source: whenever the loop could use more work, the feed turns the
videos whose captions now exist (or failed) into a part of each waiting cell's requests, and seals a cell once all of
its videos are settled. Only the calling thread touches the judge, the cells and the `CellInputs`; the caption thread
only appends events under a lock.

Nothing changes in the results: a part holds all the items of its videos, built by the protocol exactly as the whole
cell's request table would be (protocols render each (item, caption) on its own), and the cell's verdict rows come
out in the order of that one table (capeval.engine.judging.cells.Cell.table). The failures of a cell's videos are the ones
stage after stage would record, since a video counts as settled only when its caption or its failure is known (or
the caption stage has ended). Cells whose judge sees frames are judged whole once their captions are
settled (their judge frames are decoded then).
"""

from __future__ import annotations

import threading
from typing import Callable

from capeval.engine.ray_local import ray_usable
from capeval.engine.sweep.captioning import video_caption_key
from capeval.engine.sweep.cells import CellInputs
from capeval.engine.sweep.grid import ResultCell
from capeval.engine.sweep.run import SweepRun

_FRAMES, _FRAME_FAILURE, _CAPTIONS = "frames", "frame_failure", "captions"


class CaptionWatch:
    """Events of the caption stage, appended by its thread and read by the judging thread from a cursor."""

    def __init__(self):
        self._cond = threading.Condition()
        self._events: list[tuple] = []
        self.done = False
        self.error: BaseException | None = None
        self.stopped = False  # set by the judging side: the stage stops taking new videos

    def _put(self, event: tuple) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def frames(self, row: dict) -> None:
        self._put((_FRAMES, row))

    def frame_failure(self, key: tuple[str, str], failure) -> None:
        self._put((_FRAME_FAILURE, key, failure))

    def captions(self, rows: list[dict]) -> None:
        self._put((_CAPTIONS, rows))

    def finish(self, error: BaseException | None = None) -> None:
        with self._cond:
            self.done, self.error = True, error
            self._cond.notify_all()

    def read(self, cursor: int, timeout: float) -> tuple[list[tuple], bool]:
        """Events after `cursor` (waiting up to `timeout` s for one) and whether the stage has ended."""
        with self._cond:
            if timeout > 0 and len(self._events) <= cursor and not self.done:
                self._cond.wait(timeout)
            return self._events[cursor:], self.done


STOP_WAIT_AFTER_SIGTERM_S = 2.0


class CaptionThread:
    """caption_cells_for on a daemon thread; `outcome` once it has ended (`watch.error` if it raised)."""

    def __init__(self, run: Callable[["CaptionWatch"], object]):
        self.watch = CaptionWatch()
        self.outcome = None
        self._thread = threading.Thread(target=self._main, args=(run,), name="capeval-captions", daemon=True)

    def _main(self, run) -> None:
        try:
            self.outcome = run(self.watch)
        except BaseException as exc:  # noqa: BLE001 - handed to the judging thread, which raises it
            self.watch.finish(exc)
        else:
            self.watch.finish()

    def start(self) -> "CaptionThread":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the stage to end (no new video; batches in flight finish and are stored) and wait for it; after a
        SIGTERM not for long: the thread may wait in Ray on actors the same signal ended, and a daemon thread does not
        hold the process (engine/ray_local.py, `ray_usable`)."""
        self.watch.stopped = True
        self._thread.join(None if ray_usable() else STOP_WAIT_AFTER_SIGTERM_S)


class CellFeed:
    """The judge loop's source for one judge's cells. `start(cell, key)` / `part(cell, key, videos)` / `seal(cell,
    key)` are the sweep's callbacks (JudgeScheduler.add / extend / seal around building requests)."""

    def __init__(self, watch: CaptionWatch, cells: list[ResultCell], *, run: SweepRun, inputs: CellInputs, start,
                 part, seal):
        self.watch, self.cells, self.run, self.inputs = watch, cells, run, inputs
        self._start, self._part, self._seal = start, part, seal
        self._cursor = 0
        self._by_frames: dict[tuple[str, str], list] = {}  # (video, spec) -> cells waiting for its frames
        self._by_caption: dict[str, list[tuple]] = {}  # caption key -> (cell, video) waiting for it
        self._unsettled: dict = {}  # cell -> videos without caption or failure yet
        self._ready: dict = {}  # cell -> videos settled since its last part
        self._sealed: set = set()
        for cell in cells:
            self._start(cell)
            data = run.data(cell.caption)
            if cell.caption.from_file:  # read from a file: nothing to wait for
                self._unsettled[cell] = set()
                self._ready[cell] = list(data.videos)
                continue
            self._unsettled[cell] = set(data.videos)
            for vid in data.videos:
                self._check(cell, vid)
        self._flush(False)

    @property
    def open(self) -> bool:
        return len(self._sealed) < len(self.cells)

    def poll(self, timeout: float) -> None:
        events, done = self.watch.read(self._cursor, timeout)
        self._cursor += len(events)
        for event in events:
            self._apply(event)
        if done and self.watch.error is not None:
            raise self.watch.error
        if events or done:
            self._flush(done)

    # -- which videos are settled -----------------------------------------------------------------------------------
    def _check(self, cell: ResultCell, vid: str) -> None:
        spec = cell.caption.frame_spec
        if (vid, spec) in self.inputs.frame_failures:
            return self._settle(cell, vid)
        frames = self.inputs.index.get((vid, spec))
        if frames is None:
            self._by_frames.setdefault((vid, spec), []).append(cell)
            return
        key = video_caption_key(self.run, frames, cell.caption)
        if key in self.inputs.captions or key in self.inputs.caption_failures:
            return self._settle(cell, vid)
        self._by_caption.setdefault(key, []).append((cell, vid))

    def _settle(self, cell, vid: str) -> None:
        if vid in self._unsettled[cell]:
            self._unsettled[cell].discard(vid)
            self._ready.setdefault(cell, []).append(vid)

    def _apply(self, event: tuple) -> None:
        kind = event[0]
        if kind == _FRAMES:
            row = event[1]
            key = (row["video_id"], row["frame_spec"])
            self.inputs.index.setdefault(key, row)  # as the frames index read after the stage would hold it
            for cell in self._by_frames.pop(key, []):
                self._check(cell, key[0])
        elif kind == _FRAME_FAILURE:
            key = event[1]
            self.inputs.frame_failures[key] = event[2]
            for cell in self._by_frames.pop(key, []):
                self._settle(cell, key[0])
        else:
            for r in event[1]:
                if r["error"] is None:
                    self.inputs.captions[r["caption_key"]] = r
                else:
                    self.inputs.caption_failures[r["caption_key"]] = r["error"]
                for cell, vid in self._by_caption.pop(r["caption_key"], []):
                    self._settle(cell, vid)

    def _flush(self, stage_done: bool) -> None:
        """A part for every cell with newly settled videos; a cell whose videos are all settled (or the stage has
        ended: the rest will never come) is sealed."""
        for cell in self.cells:
            if cell in self._sealed:
                continue
            ready = self._ready.pop(cell, None)
            if stage_done and self._unsettled[cell]:  # no caption and no failure recorded: accounted at the seal
                ready = (ready or []) + sorted(self._unsettled[cell])
                self._unsettled[cell].clear()
            if ready:
                self._part(cell, ready)
            if not self._unsettled[cell]:
                self._seal(cell)
                self._sealed.add(cell)
