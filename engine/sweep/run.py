"""One run of a sweep: `SweepRun` carries what every stage of it reads (the config, the run folder and its stores,
the loaded datasets, the captioners' and judges' revisions, how to report) from `run_sweep` through the caption
stage (engine/sweep/captioning.py), the judge stage, the cost ledger and the run record, instead of a bag of loose
arguments.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from capeval.engine.schemas import CAPTIONS, FRAMES
from capeval.engine.store import GroupCommit, SegmentStore
from capeval.engine.sweep.config import SweepConfig
from capeval.engine.sweep.datasets import LoadedDataset
from capeval.engine.sweep.grid import CaptionCell


class RunStores:
    """The run folder's stores. Captions and the frames index are appended row by row (a caption as it is made, a
    video's frames rows as they are decoded), so they group-commit: a few hundred rows per segment, at most
    GroupCommit.interval_s of rows lost to a kill, compacted as they grow. Verdicts and metrics are the cells'
    commit points, written at once as named segments; a cell's verdicts first flush the captions and frames rows it
    was judged from, so a committed cell never refers to rows a kill could still lose."""

    def __init__(self, out: Path):
        group = GroupCommit.from_env()
        self.captions = SegmentStore(out / "captions", CAPTIONS, group=group)
        self.frames_index = SegmentStore(out / "frames_index", FRAMES, group=group)
        self.verdicts = SegmentStore(out / "verdicts", flush_before_put=(self.captions, self.frames_index))
        self.metrics = SegmentStore(out / "metrics")
        self.judge_cache = out / "judge_cache"
        self.frames = out / "frames"
        self.transcripts = out / "transcripts"  # <cell_key>.parquet: each cell's judge transcripts

    def close(self) -> None:
        """Commit what is buffered and compact the appended stores (the run folder at rest: a few files each)."""
        for store in (self.captions, self.frames_index):
            store.close()


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class SweepRun:
    """What one run of a sweep reads at every stage (see the module docstring)."""

    config: SweepConfig
    out: Path
    stores: RunStores
    datasets: dict[str, LoadedDataset]  # dataset name -> loaded (an adaptive round's: restricted to its videos)
    captioner_revisions: dict[str, str]  # captioner label -> revision (component_revision)
    judge_revisions: dict[str, str]  # judge label -> revision
    progress: bool = True
    log: Callable[[str], None] = _stderr
    accept_failures: bool = False  # retryable failures commit a cell as failures_accepted, not incomplete
    max_failure_share: float = 0.0  # the share of items without a verdict above which the run exits FAILURES
    verbose: bool = False
    started: float = field(default_factory=time.perf_counter)

    def data(self, cell: CaptionCell) -> LoadedDataset:
        return self.datasets[cell.dataset.name]

    def with_datasets(self, datasets: dict[str, LoadedDataset]) -> "SweepRun":
        """The same run over other loaded datasets (an adaptive round's prefix of each dataset's videos)."""
        return dataclasses.replace(self, datasets=datasets)

