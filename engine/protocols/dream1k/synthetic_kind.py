"""`dream1k_synthetic`: synthetic videos with DREAM-1K-style events (placeholder)."""

from __future__ import annotations

from pathlib import Path

from capeval.engine.datasets.registry import DatasetKind, DatasetLoad


def load(params: dict, *, base_dir: Path, out_dir: Path, name: str) -> DatasetLoad:
    raise NotImplementedError("the dream1k_synthetic dataset kind is not built yet")


KIND = DatasetKind("dream1k_synthetic", __doc__.split("\n\n")[0], (), load)
