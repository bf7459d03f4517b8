"""VidCapBench score extraction per mode: the official substring cascade on the whole reply vs the strict JSON
`score` field (capeval's), on replies where they disagree."""

import json

import pytest

from capeval.engine.protocols.vidcapbench.parsing import official_score, parse
from capeval.engine.schemas import NO_VERDICT, ParseStatus


def request(mode, step="score"):
    return {"step": step, "context": json.dumps({"parse": {"answer": "a dog", "settings": {"mode": mode}}})}


@pytest.mark.parametrize("reply,official,strict", [
    ("{'score': 2, 'analysis': 'exact'}", 2, 2),
    ("{'score': 0, 'analysis': 'the first 10 words say nothing'}", 1, 0),   # "1" of "10" wins officially
    ("{'score': -1, 'analysis': 'the reference has 2 people'}", 2, -1),     # "2" anywhere wins officially
    ("{'score': 1, 'analysis': 'see note -1'}", -1, 1),                     # "-1" is tested before "1"
    ('```json\n{"score": "1", "analysis": "string score"}\n```', 1, 1),
    ("Score: 1\nAnalysis: partly right.", 1, None),                         # no JSON field: no strict verdict
    ("{'score': 10, 'analysis': 'perfect'}", 1, None),                      # out of range for the field
    ("{'score': 'two', 'analysis': 'match'}", None, None),                  # no digit at all
    ("I cannot judge this.", None, None),
    ("", None, None),
])
def test_official_cascade_and_strict_field_disagree_where_expected(reply, official, strict):
    assert official_score(reply) == official
    code, status, _ = parse(request("official"), reply)
    assert (None if code == NO_VERDICT else code - 1) == official
    assert (status == ParseStatus.FAILED) == (official is None)
    code, status, _ = parse(request("strict"), reply)
    assert (None if code == NO_VERDICT else code - 1) == strict
    assert (status == ParseStatus.FAILED) == (strict is None)


def test_answer_step_keeps_the_reply_unparsed_in_official_mode():
    code, status, detail = parse(request("official", "answer"), "  Red.\n")
    assert status == ParseStatus.OK and json.loads(detail)["answer"] == "  Red.\n"
    assert parse(request("official", "answer"), "")[1] == ParseStatus.OK  # an empty reply is still a reply
    assert parse(request("strict", "answer"), "")[1] == ParseStatus.FAILED
    assert official_score(None) is None


def test_equal_prompts_are_separate_draws_when_sampling_and_shared_at_temperature_zero(tmp_path):
    """The official script calls the judge once per QA pair: two pairs whose prompts are equal get their own
    replies in official mode (no temperature sent = sampling); at temperature 0 they share one judgment."""
    from pathlib import Path

    import pyarrow as pa

    from capeval.adapters.replay import ReplayJudge
    from capeval.engine.protocols.vidcapbench.release import load_vidcapbench
    from capeval.engine.judging.runner import run_judging
    from capeval.engine.registry import lookup
    from capeval.engine.schemas import CAPTIONS, conform

    pack = Path(__file__).resolve().parents[2].parent / "shared" / "protocols" / "vidcapbench.toml"
    if not pack.is_file():
        pytest.skip(f"{pack} not present")
    pair = {"question": "What colour is the car?", "answer": "Red", "sub_category": "color"}
    (tmp_path / "qa.jsonl").write_text(json.dumps({"video_dir": "v", "QA_pairs": [pair, pair]}) + "\n")
    items = load_vidcapbench(tmp_path / "qa.jsonl")
    captions = conform(pa.table({"caption_key": ["k"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
                                 "video_id": ["v"], "text": ["A red car drives by."]}), CAPTIONS)
    judge = ReplayJudge([{"item_id": f"v#{i}", "step": step, "text": text} for i, score in enumerate((2, 0))
                         for step, text in (("answer", "Red"), ("score", f"{{'score': {score}}}"))])
    protocol = lookup("protocol", "vidcapbench")
    got = {}
    for mode, extra in (("official", {"prompts": str(pack)}), ("strict", {})):
        params = {"mode": mode, **extra}
        requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision, **params)
        verdicts = run_judging(requests, judge, cache_dir=tmp_path / mode, protocol=protocol, protocol_params=params,
                               progress=False)
        got[mode] = sorted(verdicts.column("verdict").to_pylist())
    assert got["official"] == [1, 3]  # each pair its own reply: scores 0 and 2
    assert got["strict"] == [3, 3]  # one deterministic judgment, asked once
