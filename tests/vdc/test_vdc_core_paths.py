"""VDC through the production path (api.judge with the replay judge): strict mode asks a malformed score reply again
and takes the re-ask, official mode never asks again; and a VDC question file or folder is recognised as the `vdc`
dataset kind, an items table named like a kind is not."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.engine.api import judge
from capeval.engine.protocols.vdc import PROTOCOL
from capeval.engine.schemas import ITEMS, ParseStatus, conform

OFFICIAL_PACK = Path(__file__).resolve().parents[2].parent / "shared" / "protocols" / "vdc.toml"


def _items() -> pa.Table:
    rows = [{"benchmark": "vdc", "task": "camera", "video_id": "v1", "item_id": f"camera/v1/{n:02d}",
             "media_type": "video", "annotation": q, "answer": a, "category": "",
             "extra": json.dumps({"qa_index": n, "n_questions": 2, "line": 1})}
            for n, (q, a) in enumerate([("How does the camera move", "pans left"), ("What shot is it", "wide")])]
    return conform(pa.Table.from_pylist(rows), ITEMS)


def _captions() -> pa.Table:
    return pa.Table.from_pylist([{"caption_key": "k1", "captioner": "cap", "prompt_id": "vdc_camera",
                                  "frame_spec": "f", "video_id": "v1", "text": "A wide shot; the camera pans left."}])


def _score_rows(result) -> pl.DataFrame:
    verdicts = pl.from_arrow(result.verdicts) if isinstance(result.verdicts, pa.Table) else result.verdicts
    return verdicts.filter(pl.col("step") == "score").sort("item_id")


def test_strict_mode_asks_a_malformed_verdict_again_and_takes_the_reask(tmp_path):
    replies = [{"item_id": "camera/v1/00", "step": "answer", "text": "It pans left."},
               {"item_id": "camera/v1/01", "step": "answer", "text": "A close-up."},
               {"item_id": "camera/v1/00", "step": "score", "attempt": 0, "text": "Looks right to me."},
               {"item_id": "camera/v1/00", "step": "score", "attempt": 1, "text": '{"pred": "yes", "score": 5}'},
               {"item_id": "camera/v1/01", "step": "score", "attempt": 0, "text": '{"pred": "no", "score": 1}'}]
    result = judge("vdc", _items(), _captions(), judge="replay", judge_options={"replies": replies},
                   params={"mode": "strict"}, n_resamples=0, cache=tmp_path / "cache")
    rows = _score_rows(result)
    assert rows["parse_status"].to_list() == [int(ParseStatus.REPAIRED), int(ParseStatus.OK)]
    assert rows["attempt"].to_list() == [1, 0]
    acc = result.metrics.filter((pl.col("task") == "camera") & (pl.col("metric") == "Acc"))
    assert acc["value"].to_list() == [50.0] and acc["reading"].to_list() == ["strict"]


def test_official_mode_never_asks_again(tmp_path):
    if not OFFICIAL_PACK.is_file():
        pytest.fail(f"the official VDC pack is not at {OFFICIAL_PACK} (clone beside ../shared)")
    replies = [{"item_id": "camera/v1/00", "step": "answer", "text": "It pans left."},
               {"item_id": "camera/v1/01", "step": "answer", "text": "A close-up."},
               {"item_id": "camera/v1/00", "step": "score", "attempt": 0,
                "text": "```\n{'pred': 'yes', 'score': 5}```"},
               {"item_id": "camera/v1/00", "step": "score", "attempt": 1, "text": "{'pred': 'yes', 'score': 5}"},
               {"item_id": "camera/v1/01", "step": "score", "attempt": 0, "text": "{'pred': 'no', 'score': 1}"}]
    result = judge("vdc", _items(), _captions(), judge="replay", judge_options={"replies": replies},
                   params={"mode": "official", "prompts": str(OFFICIAL_PACK)}, n_resamples=0,
                   cache=tmp_path / "cache")
    rows = _score_rows(result)
    assert rows["parse_status"].to_list() == [int(ParseStatus.FAILED), int(ParseStatus.OK)]
    assert rows["error"][0].startswith("official parse: SyntaxError")
    official = result.metrics.filter((pl.col("reading") == "official") & (pl.col("task") == "camera"))
    assert official["value"].is_null().all() and all("ZeroDivisionError" in r for r in official["reason"])


def test_vdc_question_files_are_the_vdc_dataset_kind(tmp_path):
    qa = {"v1": [{"question": "How does the camera move", "answer": "pans left", "category": ""}]}
    (tmp_path / "camera.jsonl").write_text(json.dumps(qa) + "\n")
    assert PROTOCOL.release_dataset_kind(tmp_path / "camera.jsonl") == "vdc"
    assert PROTOCOL.release_dataset_kind(tmp_path) == "vdc"
    table = tmp_path / "tables"
    table.mkdir()
    (table / "short.jsonl").write_text(json.dumps({"item_id": "a", "video_id": "v", "annotation": "q"}) + "\n")
    assert PROTOCOL.release_dataset_kind(table / "short.jsonl") is None
    assert PROTOCOL.release_dataset_kind(table) is None
