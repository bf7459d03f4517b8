"""The in-process vLLM judge and a request that sets no output limit and no seed (official mode sends none, as the
official scripts do; docs/fidelity_*.md): vLLM needs a limit per request, so it gets the rest of the model's context
(the most an API without a limit could return), and no seed is fixed (each ask a fresh draw). Real CPU engine over
the tiny random-weight model (session fixture `vllm_judge`)."""

from __future__ import annotations


def test_a_request_without_max_tokens_gets_the_rest_of_the_context_and_no_seed(vllm_judge):
    from capeval.adapters.base import JudgeRequest

    official = JudgeRequest(key="official", system="Judge the caption.", user="Caption: a dog runs on a beach.",
                            max_tokens=None, temperature=None, seed=None)
    prompt_len = len(vllm_judge.render(official))
    params = vllm_judge._sampling_params(official, prompt_len)
    assert params.max_tokens == vllm_judge.max_model_len - prompt_len
    assert params.seed is None
    limited = JudgeRequest(key="limited", user="Caption: a dog runs on a beach.", max_tokens=7, seed=3)
    assert vllm_judge._sampling_params(limited, prompt_len).max_tokens == 7
    (answer,) = vllm_judge.judge([official])
    assert answer.error is None and answer.text is not None
    assert 1 <= answer.completion_tokens <= vllm_judge.max_model_len - prompt_len
