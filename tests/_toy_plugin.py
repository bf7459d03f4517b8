"""The toy protocol (tests/toy_protocol) installed as another distribution would install it: a dist-info folder whose
`capeval.protocols` entry point names the package, on PYTHONPATH with the tests folder (engine/registry.py)."""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def toy_plugin_env(root: Path) -> dict[str, str]:
    """The environment of a capeval subprocess that finds the toy protocol through its entry point; the dist-info
    folder is written under `root`."""
    site = root / "site"
    dist = site / "toy_capeval_protocol-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-capeval-protocol\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[capeval.protocols]\ntoy_mention = toy_protocol\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(TESTS), os.environ.get("PYTHONPATH", "")])}
