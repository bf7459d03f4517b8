"""The per-request work of capeval around the judge: render -> key -> JudgeRequest, HTTP body, reply parsing."""

from __future__ import annotations

import json

from capeval.adapters.http_chat import Prices, parse_completion
from capeval.adapters.openai_http import OpenAIJudge
from capeval.engine.judging.requests import to_judge_request
from capeval.engine.protocols.base import RequestContext, make_row
from capeval.engine.protocols.capability import CapabilityVerdict, PROTOCOL, prompts
from capeval.engine.schemas import ParseStatus


def _pairs(capability_rows):
    items, captions, _ = capability_rows
    by_id = {c["video_id"]: c for c in captions.to_pylist()}
    return [(item, by_id[item["item_id"]]) for item in items.to_pylist()]


def test_render_and_key(benchmark, capability_rows):
    """Protocol render + content key (make_row) for 200 items: what build_requests does per item."""
    pairs = _pairs(capability_rows)
    pack = prompts.pack_for("strict")

    def run():
        return [make_row(r, {"item_id": item["item_id"]}, protocol="capability", judge="bench",
                         judge_revision="r0", seed=0, trial=0)
                for item, cap in pairs for r in PROTOCOL.render(item, cap, seed=0, pack=pack)]

    rows = benchmark(run)
    assert len(rows) == len(pairs) and len({r["request_key"] for r in rows}) == len(rows)


def test_to_judge_request(benchmark, capability_rows):
    _, _, rows = capability_rows
    reqs = benchmark(lambda: [to_judge_request(r) for r in rows])
    assert [r.key for r in reqs] == [r["request_key"] for r in rows]


def test_http_body(benchmark, capability_rows):
    """The OpenAI-compatible judge's body encoding (no network: the body is built and encoded only)."""
    _, _, rows = capability_rows
    reqs = [to_judge_request(r) for r in rows]
    with OpenAIJudge(model="m", base_url="http://127.0.0.1:9/v1", structured="vllm") as judge:
        bodies = benchmark(lambda: [judge.body(r) for r in reqs])
    first = json.loads(bodies[0][0])
    assert first["messages"][-1]["content"] == reqs[0].user and "structured_outputs" in first


def test_parse_replies(benchmark, capability_rows):
    """Strict parsing of well-formed replies (the common case) for 200 object_color requests."""
    _, _, rows = capability_rows
    replies = [json.dumps({"object_color": _annotation_text(r), "score": 1, "reason": "stated"}) for r in rows]
    out = benchmark(lambda: [PROTOCOL.parse(r, t) for r, t in zip(rows, replies)])
    assert all(status == ParseStatus.OK and int(code) == int(CapabilityVerdict.POSITIVE) for code, status, _ in out), \
        out[:3]


def test_parse_completion_body(benchmark):
    """Decoding a chat.completion body with usage (what the HTTP client does per answer)."""
    body = json.dumps({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": '{"score": 1, "reason": "ok"}'}, "finish_reason": "stop"}], "usage": {
        "prompt_tokens": 812, "completion_tokens": 17, "prompt_tokens_details": {"cached_tokens": 640}}}).encode()
    prices = Prices(2.0, 0.5, 8.0)
    results = benchmark(lambda: [parse_completion(body, None, prices) for _ in range(200)])
    assert results[0].cached_prompt_tokens == 640 and results[0].finish_reason == "stop"


def _annotation_text(row) -> str:
    fields = RequestContext.decode(row["context"]).fields
    return fields.get("annotation") or ""
