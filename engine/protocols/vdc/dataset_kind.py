"""`vdc`: the VDC question sets (placeholder until the loader lands)."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.datasets.registry import DatasetKind, DatasetLoad


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    raise NotImplementedError("the vdc dataset kind is not built yet")


KIND = DatasetKind("vdc", __doc__.split("\n\n")[0], (), load)
