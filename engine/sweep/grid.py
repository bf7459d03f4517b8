"""Grid expansion: a sweep is datasets x captioners x prompts x frame specs (caption cells), each crossed with
protocols x judges (result cells). A caption cell is captioned once and shared by every protocol and judge."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from engine.keys import content_key
from engine.sweep.config import ComponentSpec, DatasetSpec, SweepConfig


@dataclass(frozen=True)
class CaptionCell:
    dataset: DatasetSpec
    captioner: ComponentSpec
    prompt_id: str
    frame_spec: str


@dataclass(frozen=True)
class Cell:
    """One row group of the results table: a caption cell judged under one protocol by one judge."""

    caption: CaptionCell
    protocol: ComponentSpec
    judge: ComponentSpec

    def labels(self) -> dict[str, str]:
        """The columns that identify this cell in the results table."""
        return {
            "dataset": self.caption.dataset.name,
            "captioner": self.caption.captioner.display,
            "prompt_id": self.caption.prompt_id,
            "frame_spec": self.caption.frame_spec,
            "protocol": self.protocol.display,
            "judge": self.judge.display,
        }

    def key(self, *, dataset_digest: str, captioner_revision: str, prompt_text: str, judge_revision: str) -> str:
        """Content key of the cell's result: everything that determines its metrics."""
        cap = self.caption
        return content_key(
            "cell", dataset_digest, cap.captioner.name, captioner_revision, cap.captioner.params, prompt_text,
            cap.frame_spec, self.protocol.name, self.protocol.params, self.judge.name, judge_revision,
            self.judge.params, list(self.judge.seeds),
        )


CELL_COLUMNS = ["dataset", "captioner", "prompt_id", "frame_spec", "protocol", "judge"]


def caption_cells(config: SweepConfig) -> list[CaptionCell]:
    return [
        CaptionCell(d, c, p, f)
        for d, c, p, f in itertools.product(config.datasets, config.captioners, config.prompts, config.frames)
    ]


def expand(config: SweepConfig) -> list[Cell]:
    """All result cells, in a stable order (dataset, captioner, prompt, frames, protocol, judge)."""
    return [Cell(cc, p, j) for cc in caption_cells(config) for p in config.protocols for j in config.judges]
