"""Every module entry point parses its arguments (issue 25, item 2): for each `python -m` module under adapters/,
engine/ and benchmarks/ (a `__main__.py`, or a module with an `if __name__ == "__main__":` block), `--help` prints
usage and exits 0 without doing the module's work, and an unknown option exits 2 (argparse's usage error).
Found by reading the sources, so a new entry point is held to it too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_MAIN = re.compile(r"""^if __name__ == ["']__main__["']\s*:""", re.MULTILINE)


def entry_points() -> list[str]:
    found = []
    for package in ("adapters", "engine", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            if rel.parts[:2] == ("engine", "root"):  # the `capeval` package itself (setup.py), e.g. capeval.testing
                rel = Path(*rel.parts[2:])
            if path.name == "__main__.py":
                found.append(".".join(("capeval",) + rel.parts[:-1]))
            elif _MAIN.search(path.read_text(encoding="utf-8")):
                found.append(".".join(("capeval",) + rel.parts))
    return sorted(set(found))


def test_entry_points_are_found():
    points = entry_points()
    assert {"capeval.adapters.smollm2", "capeval.engine.cli", "capeval.engine.ray_reaper", "capeval.benchmarks.loopback_server",
            "capeval", "capeval.testing.random_vlm"} <= set(points)


@pytest.mark.parametrize("module", entry_points())
def test_help_exits_0_and_bad_option_exits_2(module, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), "CAPEVAL_MODEL_CACHE": str(tmp_path / "models")}
    run = dict(cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    helped = subprocess.run([sys.executable, "-m", module, "--help"], **run)
    assert helped.returncode == 0, (module, helped.stdout[-500:], helped.stderr[-1500:])
    assert "usage:" in helped.stdout, (module, helped.stdout[-500:])
    assert not any(tmp_path.iterdir()), (module, "--help did work:", sorted(p.name for p in tmp_path.iterdir()))
    bad = subprocess.run([sys.executable, "-m", module, "--no-such-option"], **run)
    assert bad.returncode == 2, (module, bad.returncode, bad.stderr[-1500:])
    assert "usage:" in bad.stderr, (module, bad.stderr[-500:])
