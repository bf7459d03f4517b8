"""The VDC release has three question/answer pairs whose question and answer are both empty (short.jsonl lines 1026
and 1027, detailed.jsonl line 1027); the official script sends them like any other pair, so the protocol judges the
real question sets instead of refusing the whole dataset. A missing (null) question is still refused."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from capeval.engine.datasets.registry import load
from capeval.engine.protocols.vdc import PROTOCOL

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "vdc"


@pytest.mark.skipif(not (DATA / "short.jsonl").is_file(), reason="no VDC question sets in ../shared/data/vdc")
def test_the_real_question_sets_are_accepted_with_their_empty_pairs(tmp_path):
    loaded = load("vdc", {"path": str(DATA), "kinds": ["short", "detailed"]}, base_dir=tmp_path, out_dir=tmp_path,
                  name="vdc")
    items = loaded.items
    empty = [r for r in items.select(["item_id", "annotation", "answer"]).to_pylist()
             if r["annotation"] == "" and r["answer"] == ""]
    assert len(empty) == 3, empty
    assert PROTOCOL.dataset_problem("vdc", items) is None


def test_a_missing_question_is_refused():
    items = pa.table({"item_id": ["detailed/v/00", "detailed/v/01"], "video_id": ["v", "v"],
                      "task": ["detailed", "detailed"], "annotation": ["", None], "answer": ["", "red"]})
    problem = PROTOCOL.columns_problem(items)
    assert problem is not None and "annotation" in problem and "detailed/v/01" in problem
