"""`vdc_synthetic`: synthetic videos with VDC-style questions (placeholder)."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.datasets.registry import DatasetKind, DatasetLoad


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    raise NotImplementedError("the vdc_synthetic dataset kind is not built yet")


KIND = DatasetKind("vdc_synthetic", __doc__.split("\n\n")[0], (), load)
