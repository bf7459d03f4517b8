"""LVCap-Eval's official event score follows the paper (§3.4 Eq. 1, Appendix B Prompt2 + Prompt5), through the
production path: items -> LVCapProtocol.build_requests(mode="official") with the paper's pack read in place from
../shared/protocols -> the replay judge (scripted replies) -> run_judging -> compute_metrics.

The worked example, by hand from Eq. 1 (R and P as the judge's Prompt5 line gives them, F1 = 2PR/(P+R)), then the
mean over videos (capeval's reading: the paper states no averaging):

| video | category | R    | P    | F1 = 2PR/(P+R)      | S_e      |
| vA    | Movie    | 0.50 | 1.00 | 1/1.5 = 0.666667    | 66.6667  |
| vB    | Anime    | 0.50 | 0.33 | 0.33/0.83 = 0.397590 | 39.7590 |
| vD    | Movie    | 0.00 | 0.00 | 0                   | 0        |
| vC    | Movie    | extraction rejected 10 times: left out, n_no_verdict 1 |

S_e = (66.6667 + 39.7590 + 0) / 3 = 35.4752; recall 33.3333; precision (1 + 0.33 + 0) / 3 = 44.3333. AutoDQ's
category-then-across averaging would give ((66.6667 + 0) / 2 + 39.7590) / 2 = 36.5462 instead."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.replies.repair import ParseError
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.lvcap import PROTOCOL
from capeval.engine.protocols.lvcap.metrics import compute_metrics
from capeval.engine.protocols.lvcap.paper_events import READING, parse_extract, parse_match
from capeval.engine.schemas import CAPTIONS, ITEMS, conform


def _pack_dir() -> Path:
    spec = importlib.util.spec_from_file_location("_fidelity_conftest_paper", Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PACK_DIR


PACK = _pack_dir() / "lvcap.toml"
pytestmark = pytest.mark.skipif(not PACK.is_file(), reason="the LVCap-Eval pack (../shared/protocols) is not present")

VIDEOS = {  # video -> (category, reference events, caption)
    "vA": ("Movie", ["A man opens a door.", "The man walks in.", "The man sits down.", "A dog barks."],
           "A man opens the door and sits on a chair."),
    "vB": ("Anime", ["A girl jumps.", "The girl waves."],
           "A girl jumps high. A cat runs. A bird sings."),
    "vC": ("Movie", ["A car stops."], "Something happens."),
    "vD": ("Movie", ["A boy runs.", "The boy falls."], "The sky is blue and a tree stands."),
}
EXTRACT = {
    "vA": ['{"1": "The man opens the door"}\n{"2": "The man sits on a chair"}'],
    "vB": ['```\n{"1": "A girl jumps high"}\n{"2": "A cat runs"}\n```\n\n```\n{"3": "A bird sings"}\n```'],
    "vC": ["I cannot extract events from this text."],  # never a JSON line: rejected at every try
    "vD": ['{"1": "A tree stands"}'],
}
MATCH = {
    "vA": ['{"video_id": "vA", "model": "merge", "recall": 0.50, "precision": 1.00, "f1": 0.67}'],
    # first reply rejected (no JSON line), the re-ask accepted; the judge's own f1 (0.40) is kept, not used
    "vB": ["recall 0.5, precision 0.33", '{"video_id": "vB", "model": "merge", "recall": 0.50, "precision": 0.33, '
                                         '"f1": 0.40}'],
    "vD": ['{"video_id": "vD", "model": "merge", "recall": 0.00, "precision": 0.00, "f1": 0.00}'],
}
PARAMS = {"mode": "official", "prompts": PACK}


def _items():
    rows = [{"benchmark": "lvcap", "task": "events", "item_id": v, "video_id": v, "media_type": "video",
             "annotation": json.dumps(ev), "answer": " ".join(ev), "category": cat}
            for v, (cat, ev, _) in VIDEOS.items()]
    return conform(pa.Table.from_pylist(rows), ITEMS)


def _captions():
    vids = list(VIDEOS)
    return conform(pa.table({"caption_key": [f"c-{v}" for v in vids], "captioner": ["m"] * len(vids),
                             "prompt_id": ["p"] * len(vids), "frame_spec": ["uniform:8"] * len(vids),
                             "video_id": vids, "text": [VIDEOS[v][2] for v in vids]}), CAPTIONS)


def _replies():
    out = []
    for step, table in (("extract", EXTRACT), ("event_match", MATCH)):
        for vid, texts in table.items():
            out += [{"item_id": vid, "step": step, "attempt": a, "text": texts[min(a, len(texts) - 1)]}
                    for a in range(10)]
    return out


def _run(tmp_path, params=PARAMS):
    judge = ReplayJudge(_replies())
    requests = PROTOCOL.build_requests(_items(), _captions(), judge=judge.name, judge_revision=judge.revision,
                                       **params)
    verdicts = run_judging(requests, judge, cache_dir=tmp_path / "cache", protocol=PROTOCOL, protocol_params=params,
                           progress=False, keep_intermediate=True)
    return requests, pl.from_arrow(verdicts)


def _prompt(pid: str) -> str:
    return {p["id"]: p for p in tomllib.loads(PACK.read_text(encoding="utf-8"))["prompt"]}[pid]["user"].format()


def test_paper_event_score_by_hand_through_the_production_path(tmp_path):
    requests, verdicts = _run(tmp_path)
    # Prompt2 (gt/extract_events) is what official mode sends for the caption's events, the caption after it
    assert set(requests["step"].to_pylist()) == {"extract"}
    first = requests.to_pylist()[0]
    assert first["user"].startswith(_prompt("gt/extract_events")) and first["system"] is None
    assert first["user"].endswith(VIDEOS[first["video_id"]][2])
    # Prompt5 (judge/event_match) follows an accepted extraction with E_ref and E_model attached
    match = verdicts.filter(pl.col("step") == "event_match")
    assert sorted(match["item_id"].to_list()) == ["vA", "vB", "vC", "vD"]
    assert match.filter(pl.col("item_id") == "vC")["verdict"][0] < 0  # extraction never accepted
    assert match.filter(pl.col("item_id") == "vB")["attempt"][0] == 1
    detail_b = json.loads(match.filter(pl.col("item_id") == "vB")["detail"][0])
    assert detail_b["f1"] == pytest.approx(0.33 / 0.83) and detail_b["f1_reported"] == 0.40
    assert detail_b["n_model"] == 3 and detail_b["n_gt"] == 2

    m = compute_metrics(verdicts, items=pl.from_arrow(_items()), n_resamples=200, seed=3, **PARAMS)

    def row(bucket, metric):
        r = m.filter((pl.col("bucket") == bucket) & (pl.col("metric") == metric))
        assert r.height == 1, (bucket, metric, r)
        return r.row(0, named=True)

    head = row("all", "S_e")
    assert head["value"] == pytest.approx(100 * (1 / 1.5 + 0.33 / 0.83 + 0) / 3, abs=1e-9)
    assert head["value"] == pytest.approx(35.4752, abs=1e-4)
    assert (head["n"], head["n_no_verdict"], head["mode"]) == (3, 1, "official")
    assert (head["event_scoring"], head["reading"]) == ("paper", READING)
    assert head["ci_low"] <= head["value"] <= head["ci_high"]
    assert row("all", "event_recall")["value"] == pytest.approx(100 / 3)
    assert row("all", "event_precision")["value"] == pytest.approx(100 * 1.33 / 3)
    assert row("category:Movie", "S_e")["value"] == pytest.approx(100 / 3)
    assert (row("category:Movie", "S_e")["n"], row("category:Movie", "S_e")["n_no_verdict"]) == (2, 1)
    assert row("category:Anime", "S_e")["value"] == pytest.approx(100 * 0.33 / 0.83)
    # no per-category-then-across averaging (that would be 36.5462)
    assert abs(head["value"] - 36.5462) > 1


def test_prompt5_gets_both_event_lists(tmp_path):
    requests, verdicts = _run(tmp_path)
    first = verdicts.slice(0, requests.num_rows).to_arrow()  # the first step's rows, in request order
    nxt = PROTOCOL.next_requests(requests, first, judge="replay", judge_revision=ReplayJudge(_replies()).revision)
    by_vid = {r["item_id"]: r for r in nxt.to_pylist()}
    user = by_vid["vA"]["user"]
    assert user.startswith(_prompt("judge/event_match")) and by_vid["vA"]["system"] is None
    assert '{"1": "A man opens a door."}' in user and '{"4": "A dog barks."}' in user
    assert user.endswith('{"1": "The man opens the door"}\n{"2": "The man sits on a chair"}')
    assert "extraction failed" in by_vid["vC"]["user"]


def test_autodq_is_a_named_variant_and_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="event_scoring"):
        PROTOCOL.build_requests(_items(), _captions(), judge="j", judge_revision="r", mode="official",
                                prompts=PACK, event_scoring="dream")
    with pytest.raises(ValueError, match="mode='official' only"):
        PROTOCOL.build_requests(_items(), _captions(), judge="j", judge_revision="r", event_scoring="paper")
    autodq = PACK.with_name("autodq.toml")
    with pytest.raises(ValueError, match="event_scoring='autodq'"):
        PROTOCOL.build_requests(_items(), _captions(), judge="j", judge_revision="r", mode="official",
                                prompts=PACK, event_prompts=autodq)
    req = PROTOCOL.build_requests(_items(), _captions(), judge="j", judge_revision="r", mode="official",
                                  prompts=PACK, event_prompts=autodq, event_scoring="autodq")
    assert set(req["step"].to_pylist()) == {"extract", "recall"}


def test_prompt2_and_prompt5_replies():
    assert parse_extract('{"1": "a"}\n{"2": "b"},\n```') == ["a", "b"]
    assert parse_extract("{}") == []
    for bad in (None, "", "no events here", '{"1": 3}', '{"1": "a"\n'):
        with pytest.raises(ParseError):
            parse_extract(bad)
    ok = parse_match('Result:\n{"video_id": 1, "model_name": "merge", "recall": 1, "precision": 0.5, '
                     '"f1_score": 0.67}', 2, 4)
    assert ok["f1"] == pytest.approx(2 * 0.5 / 1.5) and ok["f1_reported"] == 0.67
    assert parse_match('{"recall": 0.0, "precision": null}', 3, 0)["f1"] == 0.0  # no model events: P = 0
    for bad in ('{"recall": 1.5, "precision": 0.5}', '{"recall": 0.5}', '{"recall": "0.5", "precision": 1}',
                '{"recall": 0.5, "precision": null}', '{"recall": 0.5, "precision": 1}\n{"recall": 1, "precision": 1}'):
        with pytest.raises(ParseError):
            parse_match(bad, 2, 2)
