"""VLLMJudge against the real vLLM CPU engine over the suite's tiny random-weight model (shared `vllm_judge`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capeval.adapters.base import Judge, JudgeRequest

pytestmark = pytest.mark.vllm

SYSTEM = "You judge whether a video caption answers a question. Reply with one word."


def _captions(shared_data: Path, n: int) -> list[str]:
    path = shared_data / "capability" / "captions" / "gpt-4o-0806" / "scene.jsonl"
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line)["caption"] for _, line in zip(range(n), fh)]


def _questions(shared_data: Path, n: int) -> list[str]:
    with open(shared_data / "vdc" / "short.jsonl", encoding="utf-8") as fh:
        first = json.loads(fh.readline())
    qs = [q["question"] for q in next(iter(first.values()))]
    return qs[:n]


def _req(key: str, user: str, **kw) -> JudgeRequest:
    return JudgeRequest(key=key, user=user, system=SYSTEM, max_tokens=kw.pop("max_tokens", 8), **kw)


def test_is_a_registered_judge(vllm_judge):
    from capeval.engine.registry import lookup

    assert lookup("judge", "vllm") is type(vllm_judge)
    assert isinstance(vllm_judge, Judge)
    assert len(vllm_judge.revision) == 16


def test_choice_outputs_are_always_one_of_the_choices(vllm_judge, shared_data):
    choices = ("yes", "no", "not mentioned")
    caps = _captions(shared_data, 3)
    qs = _questions(shared_data, 4)
    reqs = [_req(f"k{i}-{j}", f"Caption: {c}\nQuestion: {q}", choices=choices, seed=j) for i, c in enumerate(caps)
            for j, q in enumerate(qs)]  # fmt: skip
    out = vllm_judge.judge(reqs)
    assert [r.key for r in out] == [r.key for r in reqs]
    for r in out:
        assert r.error is None, r.error
        assert r.text in choices
        assert r.prompt_tokens > 0 and r.completion_tokens > 0


def test_json_outputs_parse_against_the_schema(vllm_judge, shared_data):
    schema = {
        "type": "object",
        "properties": {"verdict": {"enum": ["correct", "incorrect"]}, "mentioned": {"type": "boolean"}},
        "required": ["verdict", "mentioned"],
        "additionalProperties": False,
    }
    caps = _captions(shared_data, 4)
    reqs = [_req(f"j{i}", f"Caption: {c}\nAnswer in JSON.", json_schema=json.dumps(schema), max_tokens=64, seed=i)
            for i, c in enumerate(caps)]  # fmt: skip
    for r in vllm_judge.judge(reqs):
        assert r.error is None, r.error
        obj = json.loads(r.text)
        assert set(obj) == {"verdict", "mentioned"}
        assert obj["verdict"] in ("correct", "incorrect")
        assert isinstance(obj["mentioned"], bool)


def test_same_seed_same_text_and_sampling_depends_on_seed(vllm_judge, shared_data):
    cap = _captions(shared_data, 1)[0]
    # Sampled (temperature 1) free text: the seed alone decides the output.
    reqs = [_req(f"s{s}", f"Caption: {cap}\nDescribe it.", temperature=1.0, seed=s, max_tokens=12) for s in (1, 2, 1)]
    a, b, c = vllm_judge.judge(reqs)
    again = vllm_judge.judge(reqs[:1])[0]
    assert a.text == c.text == again.text
    assert a.text != b.text  # 12 tokens sampled from a 4k vocabulary: equal only by (vanishing) chance


def test_prefix_cache_serves_the_shared_prefix_of_the_second_request(vllm_judge, shared_data):
    caps = _captions(shared_data, 30)
    # A caption not used by other tests, long enough for more than one 128-token cache block.
    prefix = "Caption: " + " ".join(caps[20:24])
    first, second = (_req(f"p{i}", f"{prefix}\nQuestion: {q}", choices=("yes", "no"))
                     for i, q in enumerate(_questions(shared_data, 2)))  # fmt: skip
    r1 = vllm_judge.judge([first])[0]
    r2 = vllm_judge.judge([second])[0]
    assert r1.prompt_tokens > 256
    assert r1.cached_prompt_tokens == 0
    assert r2.cached_prompt_tokens >= 128
    assert r2.cached_prompt_tokens < r2.prompt_tokens
    stats = vllm_judge.prefix_cache_stats()
    assert stats["cached_prompt_tokens"] >= r2.cached_prompt_tokens
    assert stats.get("engine_prefix_cache_hits", 0) >= r2.cached_prompt_tokens


def test_batch_order_preserved_with_mixed_lengths(vllm_judge, shared_data):
    caps = _captions(shared_data, 8)
    # Alternate long and very short prompts so the engine finishes them out of submission order.
    reqs = [_req(f"o{i}", caps[i] if i % 2 else "Hi", max_tokens=1 + (i % 3) * 4) for i in range(8)]
    out = vllm_judge.judge(reqs)
    assert [r.key for r in out] == [r.key for r in reqs]
    # Each response carries its own request's prompt: token counts match an independent rendering of that request.
    assert [o.prompt_tokens for o in out] == [len(vllm_judge.render(r)) for r in reqs]
    assert len({o.prompt_tokens for o in out}) > 2
    for o, r in zip(out, reqs):
        assert o.error is None and 1 <= o.completion_tokens <= r.max_tokens


def test_too_long_prompt_is_a_per_request_error(vllm_judge, shared_data):
    caps = _captions(shared_data, 40)
    huge = " ".join(caps) * 3  # far beyond max_model_len
    reqs = [_req("ok1", "Is the sky blue?", choices=("yes", "no")), _req("long", huge, choices=("yes", "no")),
            _req("ok2", "Is grass green?", choices=("yes", "no"))]  # fmt: skip
    out = vllm_judge.judge(reqs)
    assert [r.key for r in out] == ["ok1", "long", "ok2"]
    assert out[1].text is None and "max_model_len" in out[1].error
    assert out[0].text in ("yes", "no") and out[2].text in ("yes", "no")


def test_images_on_a_text_only_model_are_a_per_request_error(vllm_judge):
    reqs = [_req("img", "What is shown?", images=(b"\xff\xd8not-really-a-jpeg",)), _req("txt", "Hello", max_tokens=2)]
    img, txt = vllm_judge.judge(reqs)
    assert img.text is None and "text-only" in img.error
    assert txt.error is None and txt.text is not None


def test_bad_json_schema_is_a_per_request_error(vllm_judge):
    img, ok = vllm_judge.judge([_req("bad", "x", json_schema="{not json"), _req("ok", "y", choices=("a", "b"))])
    assert img.text is None and "json_schema" in img.error
    assert ok.text in ("a", "b")


def test_closing_one_in_process_engine_leaves_the_others_working(vllm_judge, tiny_lm_dir):
    """In-process engines share torch.distributed state: closing one must not break the suite's shared engine."""
    from capeval.adapters.base import JudgeRequest
    from capeval.adapters.vllm_engine import VLLMJudge

    req = [JudgeRequest(key="k", user="Is the caption about a dog?", choices=("yes", "no"), max_tokens=4, seed=0)]
    before = vllm_judge.judge(req)[0]
    second = VLLMJudge(tiny_lm_dir, name="second", max_model_len=512, seed=0)
    assert second.judge(req)[0].text in ("yes", "no")
    second.close()
    after = vllm_judge.judge(req)[0]
    assert after.error is None and after.text == before.text
