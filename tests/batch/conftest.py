"""Fixtures of the batch judge tests: the fake Batch API server (fake_batch_server.py, beside this file)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_batch_server import Behaviour, FakeBatchServer  # noqa: E402


@pytest.fixture
def batch_server():
    with FakeBatchServer(Behaviour()) as srv:
        yield srv
