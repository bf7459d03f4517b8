"""The OpenAI-compatible backend's config refuses values that cannot work, naming the field, before anything is sent
(adapters/openai_http.py `check_http_config`, run by `HTTPConfig.__post_init__`); `sweep --check` and
`capeval judge` report them as the user's mistake (exit 2)."""

from __future__ import annotations

import pytest

from capeval.adapters.http_transport import proxy_for
from capeval.adapters.openai_http import HTTPConfig, HTTPConfigError, OpenAIJudge

BAD = [
    ("timeout_s", "fast"), ("timeout_s", -1), ("timeout_s", 0), ("timeout_s", float("nan")), ("timeout_s", True),
    ("connect_timeout_s", -2.0), ("max_attempts", -3), ("max_attempts", 0), ("max_attempts", 2.5),
    ("max_in_flight", 0), ("backoff_base_s", -0.1), ("base_url", "ftp://x"), ("base_url", "http://"),
    ("base_url", "127.0.0.1:8000/v1"), ("structured", "nonsense"), ("model", ""), ("model", "   "),
    ("transport", "lean"), ("transport", "sdk"), ("price_prompt_per_m", -1.0), ("max_frames", 0),
    ("jpeg_quality", 0),
]


@pytest.mark.parametrize("field, value", BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_a_value_that_cannot_work_is_refused_naming_its_field(field, value):
    with pytest.raises(HTTPConfigError) as caught:
        HTTPConfig(**{field: value})
    assert isinstance(caught.value, ValueError) and caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    with pytest.raises(ValueError, match=f"^{field}: "):  # the backend's constructor says the same
        OpenAIJudge(**{"base_url": "http://127.0.0.1:9/v1", field: value})


def test_good_values_pass():
    HTTPConfig(timeout_s=30, connect_timeout_s=2.5, max_attempts=1, base_url="https://example.org/v1",
               structured="vllm", transport="aiohttp", price_cached_per_m=None, backoff_base_s=0)
    assert HTTPConfig().timeout_s > HTTPConfig().connect_timeout_s > 0


def test_sweep_check_reports_each_bad_value_by_field():
    from capeval.engine.sweep.validation import param_value_problems

    params = {"timeout_s": -1, "max_attempts": 0, "model": "", "structured": "nonsense", "base_url": "ftp://x"}
    problems = dict(param_value_problems(OpenAIJudge, params))
    assert set(problems) == set(params), problems
    assert "> 0" in problems["timeout_s"] and "http" in problems["base_url"]


def test_judge_option_timeout_minus_one_is_a_usage_error():
    from capeval.engine.judge_run.backend import build_judge
    from capeval.engine.errors import UsageError

    with pytest.raises(UsageError, match="timeout_s: must be > 0"):
        build_judge("openai", "m", "http://127.0.0.1:9/v1", ["timeout_s=-1"])


def test_proxy_from_the_environment(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy",
                "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    assert proxy_for("http://127.0.0.1:8000/v1") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    assert proxy_for("https://api.openai.com/v1") == "http://proxy.example:3128"
    assert proxy_for("https://internal.example/v1") is None
