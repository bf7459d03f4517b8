"""The local judge answers every LVCap-Eval / AutoDQ step in the format its prompt asks for (both modes parse every
reply on the first try), DREAM-1K items run end to end, and keeping intermediate rows never changes a metric."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.adapters.local_judge import LocalJudge
from capeval.engine.protocols.lvcap import dream1k
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.lvcap import PROTOCOL
from capeval.engine.protocols.lvcap.metrics import compute_metrics
from capeval.engine.schemas import CAPTIONS, ITEMS, ParseStatus, conform

ROOT = Path(__file__).resolve().parents[2]
PACK_DIR = ROOT.parent / "shared" / "protocols"
DREAM = ROOT.parent / "shared" / "data" / "dream1k" / "DREAM-1k.jsonl"
pytestmark = pytest.mark.skipif(not DREAM.is_file(), reason="DREAM-1K not present")


def _inputs():
    clips = dream1k.load_clips(DREAM).slice(0, 6)
    refs = clips["answer"].to_pylist()
    vids = clips["video_id"].to_pylist()
    # half the captions are the reference itself, half another clip's reference
    texts = [refs[i] if i % 2 == 0 else refs[(i + 3) % len(refs)] for i in range(len(vids))]
    scene_items = [{"benchmark": "lvcap", "task": "scene", "item_id": f"{vids[0]}/q{k}", "video_id": vids[0],
                    "annotation": q, "answer": a,
                    "extra": json.dumps({"scene": k // 2, "scene_description": refs[0]})}
                   for k, (q, a) in enumerate([("Does a character emerge from smoke and fire?", "yes"),
                                               ("Does the character sit on a chair?", "no"),
                                               ("Do characters grab two green monsters?", "yes"),
                                               ("Is it raining?", "no")])]
    items = pa.concat_tables([clips, conform(pa.Table.from_pylist(scene_items), ITEMS)])
    captions = conform(pa.table({"caption_key": [f"c{v}" for v in vids], "captioner": ["m"] * len(vids),
                                 "prompt_id": ["p"] * len(vids), "frame_spec": ["f"] * len(vids), "video_id": vids,
                                 "text": texts}), CAPTIONS)
    return items, captions


@pytest.mark.parametrize("mode", ["strict", "official", "official-paper"])
def test_local_judge_answers_every_step_and_keep_intermediate_changes_nothing(mode, tmp_path):
    """official: AutoDQ's event prompts (event_scoring="autodq"); official-paper: the paper's Prompt2 + Prompt5."""
    if mode != "strict" and not (PACK_DIR / "autodq.toml").is_file():
        pytest.skip("official packs not present")
    items, captions = _inputs()
    params = {"mode": mode} if mode == "strict" else \
        {"mode": "official", "prompts": PACK_DIR / "lvcap.toml", "event_scoring": "paper"} if mode == "official-paper" \
        else {"mode": "official", "prompts": PACK_DIR / "lvcap.toml", "event_prompts": PACK_DIR / "autodq.toml",
              "event_scoring": "autodq"}
    judge = LocalJudge()
    reqs = PROTOCOL.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision, **params)
    kept = run_judging(reqs, judge, cache_dir=tmp_path, protocol=PROTOCOL, protocol_params=params, progress=False,
                       keep_intermediate=True)
    v = pl.from_arrow(kept)
    assert v.filter(pl.col("parse_status") != int(ParseStatus.OK)).height == 0, \
        v.filter(pl.col("parse_status") != 0).select("step", "raw_output", "error").to_dicts()[:3]
    assert (v["attempt"] == 0).all()  # every reply accepted on the first ask
    steps = set(v["step"].to_list())
    if mode == "official":
        assert steps == {"extract", "recall", "precision", "scene_qa"}
    elif mode == "official-paper":
        assert steps == {"extract", "event_match", "scene_qa"}
    else:
        assert {"extract", "entail_r", "entail_p", "answer"} <= steps
    dropped = pl.from_arrow(run_judging(reqs, judge, cache_dir=tmp_path, protocol=PROTOCOL, protocol_params=params,
                                        progress=False))
    assert "extract" not in set(dropped["step"].to_list()) and dropped.height < v.height
    items_pl = pl.from_arrow(items)
    a = compute_metrics(v, items=items_pl, n_resamples=30, seed=1, **params)
    b = compute_metrics(dropped, items=items_pl, n_resamples=30, seed=1, **params)
    assert a.equals(b)
    head = a.filter((pl.col("bucket") == "all") & (pl.col("metric") == "S_e"))
    assert head.height == 1 and head["value"][0] is not None
    assert a.filter(pl.col("metric") == "S_s").height >= 1
    # captions equal to the reference recall more reference events than another clip's reference
    if mode == "official":
        recall = {r["item_id"]: json.loads(r["detail"])["score"] for r in v.filter(pl.col("step") == "recall")
                  .iter_rows(named=True)}
        own = [recall[i] for k, i in enumerate(items_pl["item_id"][:6]) if k % 2 == 0]
        other = [recall[i] for k, i in enumerate(items_pl["item_id"][:6]) if k % 2 == 1]
        assert sum(own) / len(own) > sum(other) / len(other)
    if mode == "official-paper":
        recall = {r["item_id"]: json.loads(r["detail"])["recall"] for r in v.filter(pl.col("step") == "event_match")
                  .iter_rows(named=True)}
        own = [recall[i] for k, i in enumerate(items_pl["item_id"][:6]) if k % 2 == 0]
        other = [recall[i] for k, i in enumerate(items_pl["item_id"][:6]) if k % 2 == 1]
        assert sum(own) / len(own) > sum(other) / len(other)
