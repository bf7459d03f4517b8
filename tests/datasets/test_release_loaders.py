"""The DREAM-1K (LVCap-Eval's AutoDQ events) and VATEX-EVAL (VC-Inspector's human ratings) release loaders on the
real files and on small bad files."""

import json

import polars as pl
import pytest

from capeval.engine import schemas
from capeval.engine.datasets.jsonl import DatasetFormatError
from capeval.engine.protocols.lvcap import dream1k
from capeval.engine.protocols.vcinspector import vatex_eval


def test_dream1k_clips_and_events(shared_data):
    path = shared_data / "dream1k" / "DREAM-1k.jsonl"
    raw = [json.loads(l) for l in open(path)]
    clips = dream1k.load_clips(path)
    events = dream1k.load_events(path)
    assert clips.schema.equals(schemas.ITEMS) and events.schema.equals(schemas.ITEMS)
    assert clips.num_rows == len(raw)
    assert events.num_rows == sum(len(r["extra_info"]["events"]) for r in raw)
    first = clips.slice(0, 1).to_pylist()[0]
    assert json.loads(first["annotation"]) == raw[0]["extra_info"]["events"]
    assert json.loads(first["extra"])["duration"] == raw[0]["extra_info"]["duration"]
    assert pl.from_arrow(events)["item_id"].n_unique() == events.num_rows


def test_dream1k_bad_event_type(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"vid": 1, "messages": [], "extra_info": {"events": "one event"}}) + "\n")
    with pytest.raises(DatasetFormatError, match=rf"{path}:1: field 'events': expected array, got string"):
        dream1k.load_clips(path)


def test_dream1k_clips_are_lvcap_event_items_matching_the_autodq_oracle(shared_data):
    """DREAM-1K clips load as the LVCap-Eval protocol's event items (task "events"), and the real clips of the AutoDQ
    oracle cases have the same events, reference and source as the oracle's inputs."""
    clips = {r["item_id"]: r for r in dream1k.load_clips(shared_data / "dream1k" / "DREAM-1k.jsonl").to_pylist()}
    assert {r["task"] for r in clips.values()} == {"events"}
    oracle = shared_data.parent / "protocols" / "autodq_oracle.jsonl"
    if not oracle.is_file():
        pytest.skip("AutoDQ oracle not present")
    for case in map(json.loads, oracle.read_text().splitlines()):
        for v in case["videos"]:
            item = clips[str(v["vid"])]
            assert json.loads(item["annotation"]) == v["events"] and item["answer"] == v["response"]
            assert item["category"] == v["dataset"]
            extra = json.loads(item["extra"])
            assert {k: extra[k] for k in v["extra_info"]} == v["extra_info"]


def test_vatex_eval_loaders(shared_data):
    folder = shared_data / "vatex_eval"
    ratings = vatex_eval.load_ratings(folder)
    assert ratings.height == 18000 and ratings["video_id"].n_unique() == 3000
    assert set(ratings["rating_0"].unique().to_list()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    items, captions = vatex_eval.load_items(folder), vatex_eval.load_captions(folder)
    assert items.schema.equals(schemas.ITEMS) and captions.schema.equals(schemas.CAPTIONS)
    assert items.num_rows == captions.num_rows == 18000
    first = json.loads(items["extra"][0].as_py())
    assert tuple(first["ratings"]) == ratings.select("rating_0", "rating_1", "rating_2").row(0) and len(first["references"]) == 9
    assert captions["video_id"][0].as_py() == items["item_id"][0].as_py() == f"{ratings['video_id'][0]}/0"


def test_vatex_eval_bad_scores(tmp_path):
    (tmp_path / "vid_cans_score_dict.json").write_text(json.dumps(
        {"v1": {"vid": "v1", "cands": "['a', 'b']", "scores": "[[1, 2, 3]]", "refs": "[['r']]"}}))
    with pytest.raises(DatasetFormatError, match="field 'scores'"):
        vatex_eval.load_ratings(tmp_path)
