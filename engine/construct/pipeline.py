"""What a construction pipeline provides to `capeval construct` (engine/cli/construct.py), and what it hands back."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from capeval.engine.errors import UsageError
from capeval.engine.packs import PromptPack

from .base import ConstructContext, RecordLog


@dataclass
class PipelineResult:
    """The items built (ITEMS rows, the format `capeval judge` and sweeps read), the per-item record, and any other
    tables the pipeline writes (name -> table, written as <name>.parquet beside the items)."""

    items: pa.Table
    record: RecordLog
    tables: dict[str, pa.Table] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # printed at the end and kept in construct.json


class ConstructionPipeline:
    """Subclasses set `name`, `summary` (one line for `--list`), `steps` (the step names, in order: each may get its
    own judge with `--step-judge STEP=...`) and implement `add_arguments`, `pack` and `run`."""

    name: str = ""
    summary: str = ""
    steps: tuple[str, ...] = ()
    #: steps that need no judge (embedding dedup, balancing): listed for the docs and --list, never given a judge
    local_steps: tuple[str, ...] = ()
    epilog: str = ""
    #: steps whose output fans out into later requests -> what their cap counts: each step keeps at most its cap
    #: per unit (the rest is recorded as over the cap, never asked about), `--max-per-item STEP=N` overrides it
    caps: dict[str, str] = {}

    def default_caps(self, args) -> dict[str, int]:
        """The cap of each step in `caps` with these options (docs/construct.md says how each was chosen)."""
        return {}

    def step_caps(self, args) -> dict[str, int]:
        """`default_caps` with the --max-per-item overrides; UsageError for a step without a cap or a bad N."""
        caps = dict(self.default_caps(args))
        for text in getattr(args, "max_per_item", None) or []:
            step, sep, value = text.partition("=")
            if step not in self.caps:
                known = ", ".join(f"{k} ({v})" for k, v in self.caps.items()) or "none"
                raise UsageError(f"--max-per-item {text!r}: {self.name} caps no step {step!r}; its capped steps: "
                                 f"{known}")
            try:
                n = int(value) if sep else 0
            except ValueError:
                n = 0
            if n < 1:
                raise UsageError(f"--max-per-item {text!r}: expected STEP=N with N >= 1")
            caps[step] = n
        return caps

    def add_arguments(self, parser) -> None:
        """The pipeline's own options (inputs, thresholds), added to `capeval construct NAME`."""

    def pack(self, mode: str, prompts: str | None) -> PromptPack:
        """The pack its prompts come from: the benchmark's (official mode, given by path) or capeval's own."""
        raise NotImplementedError

    def judged_steps(self, args) -> tuple[str, ...]:
        """The steps that will ask a judge with these options (each needs --judge or --step-judge STEP=...)."""
        return tuple(s for s in self.steps if s not in self.local_steps)

    def check(self, args) -> None:
        """Raise capeval.engine.errors.UsageError for option mistakes, before any judge starts."""

    def run(self, args, ctx: ConstructContext) -> PipelineResult:
        raise NotImplementedError
