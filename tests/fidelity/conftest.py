"""Conformance against the official code's outcomes. Oracle files are read from $CAPEVAL_ORACLE_DIR (default
../shared/protocols beside the project), so acceptance can run the same tests on further cases of the same kinds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ORACLE_DIR = Path(os.environ.get("CAPEVAL_ORACLE_DIR", ROOT.parent / "shared" / "protocols"))
#: The official prompt packs (never copied into the project): the same folder holds them.
PACK_DIR = Path(os.environ.get("CAPEVAL_PACK_DIR", ROOT.parent / "shared" / "protocols"))


def read_oracle(name: str) -> list[dict]:
    path = ORACLE_DIR / name
    if not path.is_file():
        pytest.skip(f"oracle file {path} not present")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def oracle_cases(name: str) -> list[dict]:
    """For parametrize at collection time (an absent file gives no cases; the tests then report nothing to run)."""
    path = ORACLE_DIR / name
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="session")
def pack_dir() -> Path:
    return PACK_DIR
