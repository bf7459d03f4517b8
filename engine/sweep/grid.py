"""Grid expansion: a sweep is datasets x captioners x prompts x frame specs (caption cells), each crossed with
the protocols that judge its dataset (`[[protocols]] datasets`, or every dataset the protocol can read:
engine/sweep/pairs.py) x the judges that judge each protocol (`[[protocols]] judges`, default all: result cells). A caption cell is captioned once and shared by every protocol and
judge.

`[[captions]]` files add caption cells that are read, not captioned (`CaptionCell.source`); a sweep without
protocols is caption-only: `caption_cells` is its work and `expand` is empty."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from capeval.engine.inputs import read_captions
from capeval.engine.keys import cell_key
from capeval.engine.prompts_library import get_prompt
from capeval.engine.secrets import without_secrets
from capeval.engine.sweep.checker import SweepChecker
from capeval.engine.sweep.config import CaptionSource, ComponentSpec, DatasetSpec, SweepConfig
from capeval.engine.sweep.pairs import plan_pairs, report_problems

#: the captioner name of caption cells read from a `[[captions]]` file
FILE_CAPTIONER = "file"


@dataclass(frozen=True)
class CaptionCell:
    dataset: DatasetSpec
    captioner: ComponentSpec
    prompt_id: str
    frame_spec: str
    source: CaptionSource | None = None  # captions read from this file instead of captioned

    @property
    def from_file(self) -> bool:
        return self.source is not None

    def prompt_key_text(self) -> str:
        """What of the prompt enters keys: every media-type variant of a library prompt; a file's path otherwise
        (the file's bytes enter through `source_digest` in ResultCell.key)."""
        if self.source is not None:
            return f"file:{self.source.path}"
        return get_prompt(self.prompt_id).key_text


@dataclass(frozen=True)
class ResultCell:
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

    def key(self, *, dataset_digest: str, captioner_revision: str, prompt_text: str, judge_revision: str,
            source_digest: str | None = None) -> str:
        """Content key of the cell's result: everything that determines its metrics. `source_digest`: the bytes
        of a `[[captions]]` file (capeval.engine.keys.file_digest); new settings enter only when set, so the keys of
        existing sweeps do not change."""
        cap = self.caption
        parts = [
            # credentials never enter a key: a rotated key must not redo work (engine/secrets.without_secrets)
            "cell", dataset_digest, cap.captioner.name, captioner_revision, without_secrets(cap.captioner.params),
            prompt_text, cap.frame_spec, self.protocol.name, self.protocol.params, self.judge.name, judge_revision,
            without_secrets(self.judge.params), list(self.judge.seeds),
        ]
        stamps = getattr(cap.captioner, "timestamps", "none")  # "text": another prompt was sent
        source = cap.source
        extra = {k: v for k, v in (("source", source_digest), ("max_tokens", cap.captioner.max_tokens),
                                   ("captions_format", source.format if source else None),
                                   ("id_field", source.id_field if source else None),
                                   ("timestamps", stamps if stamps != "none" else None),
                                   ("frame_size", getattr(cap.captioner, "frame_size", None))) if v}
        return cell_key(parts, extra)


CELL_COLUMNS = ["dataset", "captioner", "prompt_id", "frame_spec", "protocol", "judge"]


def caption_cells(config: SweepConfig) -> list[CaptionCell]:
    cells = [
        CaptionCell(d, c, p, f)
        for d, c, p, f in itertools.product(config.datasets, config.captioners, config.prompts, config.frames)
    ]
    for src in config.captions:
        label = src.label()
        for d in config.datasets:
            if src.dataset in (None, d.name):
                cells.append(CaptionCell(d, ComponentSpec(FILE_CAPTIONER, {}, label=label), src.prompt_id,
                                         src.frame_spec, src))
    return cells


def file_captions(cell: CaptionCell):
    """The CAPTIONS table of a `[[captions]]` cell (checked by capeval.engine.inputs.read_captions)."""
    if cell.source is None:
        raise ValueError("not a caption cell read from a file")
    return read_captions(cell.source.path, captioner=cell.source.captioner, prompt_id=cell.source.prompt_id,
                         frame_spec=cell.source.frame_spec, caption_format=cell.source.format,
                         id_field=cell.source.id_field)


def expand(config: SweepConfig, datasets: dict | None = None, *, note=None) -> list[ResultCell]:
    """All result cells, in a stable order (dataset, captioner, prompt, frames, protocol, judge): each protocol
    crossed with the datasets it judges only (engine/sweep/pairs.py), decided from `datasets` (name ->
    LoadedDataset: the run's) where given, else from the tables `--check` reads and the datasets' kinds. A pair
    that cannot work raises SweepFileError (file, line, field); `note(text)` hears of each dataset a protocol
    skips (default: printed to stderr)."""
    if not config.protocols:
        return []
    plan = plan_pairs(config, datasets, checked=config.pairs)
    if plan.problems:
        checker = SweepChecker(config.path, config.path.read_text(encoding="utf-8") if config.path.is_file() else "")
        report_problems(plan, checker)
        checker.raise_problems()
    for text in plan.notes:
        (note or _note)(text)
    return [ResultCell(cc, p, j) for cc in caption_cells(config) for i, p in enumerate(config.protocols)
            if plan.judges(i, cc.dataset.name) for j in config.judges if p.judged_by(j)]


def _note(text: str) -> None:
    import sys

    print(f"note: {text}", file=sys.stderr, flush=True)
