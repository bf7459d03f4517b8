"""A registered protocol is one shared object (every lookup returns it): building requests must leave nothing on it,
so two builds with different inputs (a sweep's cells, the CLI's judge command) cannot read each other's leftovers.
What the CLI reports about a build (items with no caption) is counted from the inputs, not read off the protocol."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from capeval.engine.protocols.base import count_uncaptioned_items, pair_items_captions
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, conform


def _items(benchmark: str, task: str, answer: str, videos=("v1", "v2", "v3")) -> pa.Table:
    rows = [{"benchmark": benchmark, "task": task, "item_id": f"{v}/q", "video_id": v, "annotation": f"About {v}?",
             "answer": answer, "options": ["yes", "no"] if benchmark == "capquiz" else None,
             "extra": json.dumps({"scene": 1, "scene_description": "A scene.", "duration": 30})} for v in videos]
    return conform(pa.Table.from_pylist(rows), ITEMS)


def _captions(videos=("v1",)) -> pa.Table:
    n = len(videos)
    return conform(pa.table({"caption_key": [f"k-{v}" for v in videos], "captioner": ["m"] * n,
                             "prompt_id": ["p"] * n, "frame_spec": ["f"] * n, "video_id": list(videos),
                             "text": ["A caption."] * n}), CAPTIONS)


@pytest.mark.parametrize("protocol,task,answer", [("capquiz", "capquiz", "yes"), ("lvcap", "scene", "yes")])
def test_build_requests_leaves_no_state_on_the_registered_protocol(protocol, task, answer):
    p = lookup("protocol", protocol)
    before = dict(vars(p))
    requests = p.build_requests(_items(protocol, task, answer), _captions(), judge="j", judge_revision="r")
    assert requests.num_rows >= 1
    assert vars(p) == before
    assert lookup("protocol", protocol) is p


def test_uncaptioned_items_are_counted_from_the_inputs():
    items = _items("capquiz", "capquiz", "yes")
    assert count_uncaptioned_items(items, _captions(("v1",))) == 2
    assert count_uncaptioned_items(items, _captions(("v1", "v2", "v3"))) == 0
    assert [(i["item_id"], c["caption_key"]) for i, c in pair_items_captions(items, _captions(("v2",)))] == \
        [("v2/q", "k-v2")]
