"""`capeval judge --protocol vdc --judge local` in both modes, through the command line a user runs: the local
judge answers every answer-step and score-step request with VDC's stand-in (engine/protocols/vdc/stand_in.py) and
every reply parses under the mode's own rules (official: the script's `ast.literal_eval` reading; strict: the
pack's JSON), with no re-ask. Items are real VDC questions (the first videos of ../shared/data/vdc/detailed.jsonl)
plus questions whose answers the caption says, read through the `vdc` dataset kind."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import polars as pl
import pytest

from capeval.engine.cli import main
from capeval.engine.schemas import ParseStatus

PACK = Path(__file__).resolve().parents[2].parent / "shared" / "protocols" / "vdc.toml"
CAPTION = ("The video shows three objects on a navy background: a green square in the top left that moves down; a "
           "red circle in the right that moves left. The camera stays still.")
ANSWERABLE = [{"question": "What color is the background", "answer": "navy", "category": "environment"},
              {"question": "In which direction does the red circle move", "answer": "left", "category": "action"}]


def _inputs(tmp_path: Path, shared_data: Path) -> tuple[Path, Path, list[str]]:
    lines = (shared_data / "vdc" / "detailed.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    records = [{vid: qa[:3] + ANSWERABLE} for line in lines for vid, qa in json.loads(line).items()]
    items = tmp_path / "detailed.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records))
    videos = [next(iter(r)) for r in records]
    captions = tmp_path / "captions.jsonl"
    captions.write_text("".join(json.dumps({"video_id": v, "caption": CAPTION, "captioner": "hand",
                                            "prompt_id": "vdc_detailed"}) + "\n" for v in videos))
    return items, captions, videos


@pytest.mark.parametrize("mode", ["official", "strict"])
def test_every_request_of_both_steps_is_answered_and_parses(tmp_path, shared_data, mode):
    items, captions, videos = _inputs(tmp_path, shared_data)
    out = tmp_path / "v.parquet"
    argv = ["judge", "--protocol", "vdc", "--dataset", "vdc", "--items", str(items), "--captions", str(captions),
            "--judge", "local", "--mode", mode, "--cache", str(tmp_path / "cache"), "--out", str(out),
            "--keep-intermediate", "--resamples", "0", "--no-progress"]
    if mode == "official":
        if not PACK.is_file():
            pytest.skip("the official VDC pack is not present")
        argv += ["--prompts", str(PACK)]
    assert main(argv) == 0
    verdicts = pl.read_parquet(out)
    n_items = 2 * (3 + len(ANSWERABLE))
    for step in ("answer", "score"):
        rows = verdicts.filter(pl.col("step") == step)
        assert rows.height == n_items, step
        assert rows["parse_status"].to_list() == [int(ParseStatus.OK)] * n_items, rows["error"].to_list()
        assert set(rows["attempt"].to_list()) == {0}  # accepted on the first ask
    answers = verdicts.filter(pl.col("step") == "answer")
    assert all(a and a in CAPTION for a in answers["raw_output"].to_list())  # answered from the caption
    scores = verdicts.filter(pl.col("step") == "score")
    for reply in scores["raw_output"].to_list():
        value = ast.literal_eval(reply) if mode == "official" else json.loads(reply)
        assert set(value) == {"pred", "score"} and value["pred"] in ("yes", "no") and 0 <= value["score"] <= 5
        if mode == "official":
            assert reply.startswith("{'pred': ")  # the Python dict the official prompt asks for
        else:
            assert reply.startswith('{"pred": ')
    # the questions the caption answers are judged yes, the reference's words being in the answer
    yes = scores.filter(pl.col("item_id").str.ends_with("/03") | pl.col("item_id").str.ends_with("/04"))
    assert yes.height == 4 and set(yes["verdict"].to_list()) == {1}
    assert set(scores["video_id"].to_list()) == set(videos)
