"""The official prompt texts and the papers are other people's sentences: the project must not repeat them.
`../shared/tools/borrowed-text` lists every run of 20+ words the project shares with the packs or papers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT.parent / "shared" / "tools" / "borrowed-text"


@pytest.mark.skipif(not TOOL.is_file(), reason="shared/tools/borrowed-text is not beside the project")
def test_project_repeats_no_official_text():
    proc = subprocess.run([str(TOOL), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"borrowed passages found:\n{proc.stdout}\n{proc.stderr}"
