"""The pytest-benchmark micro-benchmarks (benchmarks/micro/) keep working: run once with timing disabled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_micro_benchmarks_run_with_benchmark_disabled():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--benchmark-disable",
         str(REPO / "benchmarks" / "micro")],
        cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert "7 passed" in proc.stdout, tail
