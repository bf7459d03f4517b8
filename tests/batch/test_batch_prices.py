"""Batch prices: a batch judge's tokens are priced at the streaming prices x (1 - batch_discount), in the answers it
returns and in a sweep's cost figures (engine/sweep/prices.py: run cost and `capeval plan`)."""

from __future__ import annotations

import pytest
from _batch_data import file_sweep

from capeval.adapters.base import JudgeRequest
from capeval.adapters.http_chat import Prices as ListPrices
from capeval.adapters.openai_batch import OpenAIBatchJudge
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.prices import resolve_prices

PRICES = {"price_prompt_per_m": 2.0, "price_cached_per_m": 1.0, "price_completion_per_m": 8.0}


def test_answers_cost_the_discounted_price(batch_server, tmp_path):
    reqs = [JudgeRequest(key=f"k{i}", user=f"question {i} " * 20, choices=("A", "B")) for i in range(3)]
    for discount in (0.5, 0.2):
        with OpenAIBatchJudge(model="m", base_url=batch_server.base_url, api_key="k", structured="vllm",
                              state_dir=str(tmp_path / str(discount)), poll_s=0.01, batch_discount=discount,
                              **PRICES) as judge:
            got = judge.judge(reqs)
        for g in got:
            listed = ListPrices(2.0, 1.0, 8.0).cost(g.prompt_tokens, g.cached_prompt_tokens, g.completion_tokens)
            assert g.prompt_tokens > 0 and g.cost_usd == pytest.approx(listed * (1 - discount))


@pytest.mark.parametrize("name,params,share", [
    ("openai-batch", {}, 0.5),  # OpenAI's Batch API: half price by default
    ("openai-batch", {"batch_discount": 0.25}, 0.75),
    ("openai", {}, 1.0),  # the streaming judge pays the list price
    ("vllm-batch", {}, 1.0),  # vLLM's offline runner: no discount unless the params give one
])
def test_sweep_cost_figures_use_the_batch_price(name, params, share, tmp_path):
    judge = {"name": name, "params": {"model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key": "k", **PRICES,
                                      **params}}
    config = load_sweep(file_sweep(tmp_path, "capquiz", judge))
    (label,) = [j.display for j in config.judges]
    p = resolve_prices(config)[("judge", label)]
    assert (p.input, p.cached_input, p.output) == pytest.approx((2.0 * share, 1.0 * share, 8.0 * share))
    assert ("batch discount" in p.source) == name.endswith("-batch")
