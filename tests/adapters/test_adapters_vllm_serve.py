"""`vllm serve` of the tiny model (the `vllm_server` fixture) answers the real OpenAI client."""

from __future__ import annotations

import pytest

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
