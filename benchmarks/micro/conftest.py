"""Micro-benchmarks (pytest-benchmark): the judge request path and the kernels, on real CAPability rows.

    pytest benchmarks/micro --benchmark-json=.capeval/micro.json      # measure
    pytest benchmarks/micro --benchmark-disable                       # just check they run (tests/benchmarks/)

Not part of the default test run (pyproject's testpaths = ["tests"]). Every benchmark also checks its result, so
the disabled mode is a real test of the code it times.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from capeval.engine.protocols.capability import release as capability
from capeval.engine.registry import lookup

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("CAPEVAL_SHARED_DATA", REPO.parent / "shared" / "data")).resolve()
N_ITEMS = 200


@pytest.fixture(scope="session")
def capability_rows():
    """(items, captions, request rows) for the first N_ITEMS object_color items with gpt-4o-0806's released
    captions, read in place."""
    annotations = SHARED_DATA / "capability" / "annotations" / "object_color.jsonl"
    if not annotations.is_file():
        pytest.skip(f"real data not found at {SHARED_DATA}")
    items = capability.load_items(annotations).slice(0, N_ITEMS)
    captions = capability.load_captions(SHARED_DATA / "capability" / "captions" / "gpt-4o-0806", items)
    protocol = lookup("protocol", "capability")
    table = protocol.build_requests(items, captions, judge="bench", judge_revision="r0")
    rows = table.to_pylist()
    assert len(rows) == N_ITEMS
    return items, captions, rows
