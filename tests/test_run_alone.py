"""tests/_run_alone.py: with pytest-xdist workers, a test marked `alone` runs while no other test does, and the
others still run side by side."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from _run_alone import RunAlone

def pytest_configure(config):
    config.pluginmanager.register(RunAlone(config), "capeval-run-alone")
"""

TIMED = """
import os, time
from pathlib import Path
import pytest

def timed(name, seconds):
    start = time.time()
    time.sleep(seconds)
    Path(os.environ["SPANS"], name).write_text(f"{start} {time.time()}")
"""


def test_an_alone_test_runs_while_no_other_does_and_the_others_overlap(tmp_path):
    project, spans = tmp_path / "project", tmp_path / "spans"
    project.mkdir()
    spans.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    body = TIMED + "".join(f"\ndef test_side_{i}():\n    timed('side_{i}', 0.6)\n" for i in range(6))
    body += "\n@pytest.mark.alone\ndef test_alone():\n    timed('alone', 1.5)\n"
    body += "".join(f"\ndef test_late_{i}():\n    timed('late_{i}', 0.6)\n" for i in range(6))
    (project / "test_spans.py").write_text(textwrap.dedent(body))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "worksteal", "-p",
                          "no:cacheprovider", str(project)], cwd=project, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "SPANS": str(spans)})
    assert run.returncode == 0, run.stdout + run.stderr
    span = {p.name: tuple(map(float, p.read_text().split())) for p in spans.iterdir()}
    assert len(span) == 13
    alone = span.pop("alone")
    overlapping = [name for name, (start, end) in span.items() if start < alone[1] and end > alone[0]]
    assert not overlapping, f"ran beside the alone test: {overlapping}"
    pairs = [(a, b) for a in span for b in span if a < b and span[a][0] < span[b][1] and span[a][1] > span[b][0]]
    assert pairs, "no two tests ran side by side: the workers did not run in parallel"
