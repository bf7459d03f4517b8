"""Backend capabilities are declared in capeval.adapters.base (JudgeCapabilities, CaptionerCapabilities and the
optional protocols they name): a backend that declares nothing gets the documented defaults, one that declares a
capability gets it, a value of the wrong type counts as undeclared, and the builtin backends declare what the judge
loop and the caption stage use of them."""

from __future__ import annotations

from capeval.adapters.base import (CaptionerCapabilities, JudgeCapabilities, RetryReportingJudge, RoundJudge,
                                   StreamingJudge, TokenLimitJudge, captioner_capabilities, judge_capabilities)
from capeval.adapters.openai_http import OpenAICaptioner, OpenAIJudge
from capeval.adapters.replay import ReplayJudge
from capeval.engine.registry import lookup


class PlainJudge:
    name, revision = "plain", "1"

    def judge(self, requests):
        return []

    def close(self):
        pass


class EveryCapabilityJudge(PlainJudge):
    max_in_flight = 32
    thread_safe = True
    max_reply_chars = 500
    round_requests = 1000

    def stream(self, feed, max_in_flight):
        yield from ()

    def watch_retries(self, callback):
        pass

    def use_state_dir(self, folder):
        pass

    def forget_answer(self, key):
        pass

    def sent_max_tokens(self, max_tokens, choices, json_schema):
        return max_tokens


def test_a_judge_that_declares_nothing_gets_the_defaults():
    assert judge_capabilities(PlainJudge()) == JudgeCapabilities()
    assert JudgeCapabilities() == JudgeCapabilities(streaming=False, max_in_flight=None, thread_safe=False,
                                                    max_reply_chars=None, reports_retries=False, round_requests=0,
                                                    adjusts_max_tokens=False)


def test_a_judge_gets_what_it_declares():
    assert judge_capabilities(EveryCapabilityJudge()) == JudgeCapabilities(
        streaming=True, max_in_flight=32, thread_safe=True, max_reply_chars=500, reports_retries=True,
        round_requests=1000, adjusts_max_tokens=True)


def test_values_of_the_wrong_type_count_as_undeclared():
    judge = EveryCapabilityJudge()
    judge.max_in_flight, judge.max_reply_chars, judge.round_requests = True, -5, "many"
    caps = judge_capabilities(judge)
    assert (caps.max_in_flight, caps.max_reply_chars, caps.round_requests) == (None, None, 0)


def test_builtin_judges_declare_what_the_loop_uses():
    http = OpenAIJudge(model="m", base_url="http://127.0.0.1:9/v1", api_key="k", max_in_flight=16)
    try:
        assert isinstance(http, StreamingJudge) and isinstance(http, RetryReportingJudge)
        assert isinstance(http, TokenLimitJudge) and not isinstance(http, RoundJudge)
        assert judge_capabilities(http) == JudgeCapabilities(streaming=True, max_in_flight=16, thread_safe=True,
                                                             reports_retries=True, adjusts_max_tokens=True)
    finally:
        http.close()
    assert judge_capabilities(ReplayJudge([])) == JudgeCapabilities()
    for name in ("openai-batch", "vllm-batch"):  # the batch judges answer rounds (their classes: no instance needed)
        cls = lookup("judge", name)
        assert all(callable(getattr(cls, m, None)) for m in ("use_state_dir", "forget_answer", "stream"))


def test_captioner_capabilities_from_an_instance_or_a_class():
    assert captioner_capabilities(object()) == CaptionerCapabilities()
    assert captioner_capabilities(OpenAICaptioner).actor_cpus == 0.0  # read from the class, before any instance
    assert captioner_capabilities(OpenAICaptioner).streaming
    assert captioner_capabilities(lookup("captioner", "local")).actor_cpus == 1.0
    assert captioner_capabilities(lookup("captioner", "vllm")).streaming
