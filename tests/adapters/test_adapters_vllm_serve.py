"""`vllm serve` of the tiny model (the `vllm_server` fixture) answers the real OpenAI client."""

from __future__ import annotations

import pytest

from _feeds import FixedFeed

pytestmark = pytest.mark.vllm


def test_chat_completion_through_openai_client(vllm_server):
    from openai import OpenAI

    client = OpenAI(base_url=vllm_server.base_url, api_key="unused", timeout=120)
    assert vllm_server.model in [m.id for m in client.models.list().data]
    resp = client.chat.completions.create(
        model=vllm_server.model,
        messages=[{"role": "system", "content": "Answer yes or no."},
                  {"role": "user", "content": "Caption: a man walks a dog in the park. Is there a dog?"}],  # fmt: skip
        max_tokens=6,
        temperature=0,
        seed=3,
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
    )
    assert resp.choices[0].message.content in ("yes", "no")
    assert resp.usage.prompt_tokens > 10
    assert resp.usage.completion_tokens >= 1
    free = client.chat.completions.create(
        model=vllm_server.model, messages=[{"role": "user", "content": "Describe the scene."}], max_tokens=5, seed=1
    )
    assert free.choices[0].message.content
    assert free.usage.completion_tokens == 5 or free.choices[0].finish_reason == "stop"


def test_openai_judge_streams_and_reads_cached_tokens(vllm_server):
    """OpenAIJudge.stream against `vllm serve` (started with --enable-prompt-tokens-details): every request answered
    within the window, and requests sharing a long prefix report cached prompt tokens from the server's usage."""
    from capeval.adapters.base import JudgeRequest
    from capeval.adapters.openai_http import OpenAIJudge

    caption = ("Caption: a man in a red jacket walks a brown dog along a wet street at night, passing a bakery "
               "with a lit window, then crosses the road while a bus drives by on the left. ") * 3
    first = [JudgeRequest(key="warm", system="Answer yes or no.", user=f"{caption}\nQuestion: is it night?",
                          choices=("yes", "no"), max_tokens=4)]
    reqs = [JudgeRequest(key=f"q{i}", system="Answer yes or no.", user=f"{caption}\nQuestion {i}: is there a dog?",
                         choices=("yes", "no"), max_tokens=4, seed=i) for i in range(6)]

    with OpenAIJudge(model=vllm_server.model, base_url=vllm_server.base_url, structured="vllm", max_in_flight=4,
                     timeout_s=120) as judge:
        assert judge.judge(first)[0].error is None  # puts the shared prefix into the server's cache
        out = list(judge.stream(FixedFeed(reqs), 3))
    assert sorted(o.key for o in out) == sorted(r.key for r in reqs)
    assert all(o.error is None and o.text in ("yes", "no") for o in out), [o.error for o in out]
    cached = sum(o.cached_prompt_tokens for o in out)
    prompt = sum(o.prompt_tokens for o in out)
    assert cached > 0.5 * prompt, (cached, prompt)  # the caption prefix came from vLLM's prefix cache
