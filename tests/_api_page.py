"""docs/api.md's example: its fenced python blocks, run verbatim in order as one script (tests/test_api.py in this
checkout, tests/test_packaging.py in a fresh install)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(path: Path = PAGE) -> list[str]:
    return _BLOCK.findall(path.read_text(encoding="utf-8"))


def run_page(python: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The page's blocks as one script run by `python` in `cwd` (the script's files land there)."""
    script = cwd / "api_page.py"
    script.write_text("\n".join(python_blocks()), encoding="utf-8")
    return subprocess.run([python, str(script)], cwd=cwd, env=env or dict(os.environ), capture_output=True,
                          text=True, timeout=600)
