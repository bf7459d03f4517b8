"""AutoDQ official mode: rendering byte for byte against the shared pack on every real DREAM-1K clip, the pack
digest in request keys, the official acceptance rules on edge replies, and strict mode's different flow."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.protocols.lvcap import dream1k
from capeval.engine.replies.repair import ParseError
from capeval.engine.judging.runner import run_judging
from capeval.engine.packs import builtin_pack_path
from capeval.engine.protocols.lvcap import PROTOCOL
from capeval.engine.protocols.lvcap.autodq import clean_entailment, parse_entailment, parse_extract
from capeval.engine.protocols.lvcap.metrics import compute_metrics
from capeval.engine.schemas import CAPTIONS, conform


def _pack_dir() -> Path:
    spec = importlib.util.spec_from_file_location("_fidelity_conftest_rules", Path(__file__).with_name("conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PACK_DIR


PACK_DIR = _pack_dir()
DREAM = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "dream1k" / "DREAM-1k.jsonl"
pytestmark = pytest.mark.skipif(not (PACK_DIR / "autodq.toml").is_file() or not DREAM.is_file(),
                                reason="shared packs / DREAM-1K not present")
ODD = ['He said "stop" and {left}.', "Line one.\nLine two: {0} 走る", "", "A 'quoted' dog's tail {{wags}}."]


def _captions(items, texts):
    vids = items.column("video_id").to_pylist()
    return conform(pa.table({"caption_key": [f"c{v}" for v in vids], "captioner": ["m"] * len(vids),
                             "prompt_id": ["p"] * len(vids), "frame_spec": ["f"] * len(vids), "video_id": vids,
                             "text": [texts[i % len(texts)] for i in range(len(vids))]}), CAPTIONS)


def _official_params():
    return {"mode": "official", "prompts": PACK_DIR / "lvcap.toml", "event_prompts": PACK_DIR / "autodq.toml",
            "event_scoring": "autodq"}


def test_official_prompts_render_byte_for_byte_on_every_dream1k_clip():
    items = dream1k.load_clips(DREAM)
    preds = [json.loads(line)["messages"][1]["content"][0]["reference"] for line in DREAM.open()]
    texts = [p + (f" {ODD[i % 4]}" if i % 7 == 0 else "") for i, p in enumerate(preds[::-1])]
    captions = _captions(items, texts)
    reqs = PROTOCOL.build_requests(items, captions, judge="j", judge_revision="r", **_official_params()).to_pylist()
    pack = {p["id"]: p["user"] for p in tomllib.loads((PACK_DIR / "autodq.toml").read_text())["prompt"]}
    by_item = {r["item_id"]: r for r in items.to_pylist()}
    cap_of = dict(zip(captions["video_id"].to_pylist(), captions["text"].to_pylist()))
    assert len(reqs) == 2 * items.num_rows
    n_empty = 0
    for r in reqs:
        item, caption = by_item[r["item_id"]], cap_of[r["item_id"]]
        ctx = json.loads(r["context"])
        assert r["system"] is None and ctx["temperature"] is None  # one user message, no sampling parameters
        if r["step"] == "extract":
            assert r["user"] == pack["judge/extract_events"].format(caption=caption.lower().replace('"', "'"))
        else:
            assert r["step"] == "recall"
            events = json.loads(item["annotation"])
            shown = events if events else [item["answer"].lower().replace("\n", " ")]
            n_empty += not events
            assert r["user"] == pack["judge/entailment"].format(description=caption.lower(), events=str(shown))
    assert n_empty == 4  # DREAM-1K clips 649, 804, 980, 981 have no reference events


def test_pack_digest_enters_the_request_keys(tmp_path):
    items = dream1k.load_clips(DREAM).slice(0, 3)
    captions = _captions(items, ["A man walks."])
    a = PROTOCOL.build_requests(items, captions, judge="j", judge_revision="r", **_official_params())
    copy = tmp_path / "autodq.toml"
    copy.write_bytes((PACK_DIR / "autodq.toml").read_bytes() + b"\n# same prompts, another file\n")
    b = PROTOCOL.build_requests(items, captions, judge="j", judge_revision="r",
                                **{**_official_params(), "event_prompts": copy})
    assert a["user"].to_pylist() == b["user"].to_pylist()
    assert not set(a["request_key"].to_pylist()) & set(b["request_key"].to_pylist())
    strict = PROTOCOL.build_requests(items, captions, judge="j", judge_revision="r")
    assert not set(a["request_key"].to_pylist()) & set(strict["request_key"].to_pylist())


def test_extraction_acceptance_rules():
    assert parse_extract("```python\n{'events': ['a', 'b']}\n```") == ["a", "b"]
    assert parse_extract('{"events": []}') == []
    assert parse_extract("{'events': ['a', 3]}") == ["a", 3]  # only the first item is checked
    for bad in ("Sure: {'events': ['a']}", "{'events': [3, 'a']}", "{'events': 'a'}", "['a']", None,
                " ```json\n{'events': ['a']}\n```"):  # a fence counts only at the very start
        with pytest.raises(ParseError):
            parse_extract(bad)


def test_entailment_acceptance_rules():
    ok = '{"events": [{"event": "a", "relationship": " Entailment ", "reason": "x"} {"event": "b", ' \
         '"relationship": "NEUTRAL", "reason": "y"},]}'
    assert parse_entailment(ok, 2) == {"relationships": [" Entailment ", "NEUTRAL"], "hits": 1, "n_events": 2,
                                       "score": 0.5}
    assert clean_entailment('```json\n"events": [\n]\n```') == '{"events": [ ]}'  # as the official clean-up leaves it
    one = '{"events": [{"event": "x", "relationship": "contradiction", "reason": "r"}]}'
    assert parse_entailment(one, 0)["score"] == 1.0  # an empty list scores 1.0 whatever the verdict
    for bad, n in ((one, 2), ('{"events": [{"event": "x", "relationship": "entails"}]}', 1),
                   ('{"events": [{"event": "x"}]}', 1), ("I cannot help.", 1), (None, 1)):
        with pytest.raises(ParseError):
            parse_entailment(bad, n)


def test_no_content_is_a_failed_try_then_accepted(tmp_path):
    """A reply without content counts as one of the 10 tries (the official loop catches the error and asks again)."""
    items = dream1k.load_clips(DREAM).slice(0, 1)
    vid = items["item_id"][0].as_py()
    n = len(json.loads(items["annotation"][0].as_py()))
    good = json.dumps({"events": [{"event": f"e{i}", "relationship": "entailment", "reason": "r"} for i in range(n)]})
    replies = [{"item_id": vid, "step": "extract", "attempt": 0, "text": "{'events': ['a man walks.']}"},
               {"item_id": vid, "step": "recall", "attempt": 0, "text": None},
               {"item_id": vid, "step": "recall", "attempt": 1, "text": good},
               {"item_id": vid, "step": "precision", "attempt": 0, "text": json.dumps(
                   {"events": [{"event": "a man walks.", "relationship": "neutral", "reason": "r"}]})}]
    judge = ReplayJudge(replies)
    params = _official_params()
    reqs = PROTOCOL.build_requests(items, _captions(items, ["A man walks."]), judge=judge.name,
                                   judge_revision=judge.revision, **params)
    v = pl.from_arrow(run_judging(reqs, judge, cache_dir=tmp_path, protocol=PROTOCOL, protocol_params=params,
                                  progress=False))
    recall = v.filter(pl.col("step") == "recall").row(0, named=True)
    assert recall["verdict"] == 0 and recall["attempt"] == 1 and json.loads(recall["detail"])["score"] == 1.0
    m = compute_metrics(v, items=pl.from_arrow(items), n_resamples=0, **params)
    head = m.filter((pl.col("bucket") == "all") & (pl.col("metric") == "S_e")).row(0, named=True)
    assert head["value"] == pytest.approx(0.0) and head["n"] == 1 and head["n_no_verdict"] == 0


def test_strict_mode_judges_each_event_with_capevals_pack():
    items = dream1k.load_clips(DREAM).slice(0, 2)
    reqs = PROTOCOL.build_requests(items, _captions(items, ["A man walks."]), judge="j", judge_revision="r")
    steps = [r["step"] for r in reqs.to_pylist()]
    n_events = sum(len(json.loads(a)) for a in items["annotation"].to_pylist())
    assert steps.count("extract") == 2 and steps.count("entail_r") == n_events
    own = tomllib.loads(builtin_pack_path("lvcap").read_text())
    system = {p["id"]: p.get("role_system") for p in own["prompt"]}
    assert all(r["system"] == system["judge/entail_one"] for r in reqs.to_pylist() if r["step"] == "entail_r")
    assert all(r["choices"] == ["entailment", "neutral", "contradiction"] for r in reqs.to_pylist()
               if r["step"] == "entail_r")


def test_events_only_official_run_needs_only_the_autodq_pack(monkeypatch):
    monkeypatch.delenv("CAPEVAL_PACKS", raising=False)
    items = dream1k.load_clips(DREAM).slice(0, 2)
    reqs = PROTOCOL.build_requests(items, _captions(items, ["A man walks."]), judge="j", judge_revision="r",
                                   mode="official", event_prompts=PACK_DIR / "autodq.toml", event_scoring="autodq")
    assert sorted(set(reqs["step"].to_pylist())) == ["extract", "recall"]
    # the paper's scoring (the default) needs only the LVCap-Eval pack: Prompt2 first, Prompt5 after it
    reqs = PROTOCOL.build_requests(items, _captions(items, ["A man walks."]), judge="j", judge_revision="r",
                                   mode="official", event_prompts=PACK_DIR / "lvcap.toml")
    assert sorted(set(reqs["step"].to_pylist())) == ["extract"]
    from capeval.engine.packs import PackError

    for scoring in ("autodq", None):  # no pack anywhere: a clear error
        with pytest.raises(PackError, match="official mode needs"):
            PROTOCOL.build_requests(items, _captions(items, ["A man walks."]), judge="j", judge_revision="r",
                                    mode="official", event_scoring=scoring)


def test_sweep_params_resolve_the_event_pack_relative_to_the_sweep_file(tmp_path):
    from capeval.engine.sweep.validation import protocol_param_problems

    params = {"mode": "official", "prompts": "lvcap.toml", "event_prompts": "autodq.toml"}
    assert protocol_param_problems(params, PACK_DIR) == []
    assert params["event_prompts"] == str((PACK_DIR / "autodq.toml").resolve())
    problems = protocol_param_problems({"event_prompts": "nope.toml"}, tmp_path)
    assert problems == [("event_prompts", f"prompt pack not found: {tmp_path / 'nope.toml'}")]
