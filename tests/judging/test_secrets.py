"""engine/secrets.py: which names are credentials, and redaction of objects, argv and free text (log lines, error
messages that quote a request's headers or a config)."""

from __future__ import annotations

import pytest

from capeval.engine import secrets as S
from capeval.engine.secrets import REDACTED, is_secret_name, redact, redact_argv, redact_text, without_secrets


@pytest.mark.parametrize("name", ["api_key", "API_KEY", "apikey", "openai-api-key", "hf_token", "token", "password",
                                  "aws_secret_access_key", "client_secret", "auth", "Authorization", "bearer",
                                  "credentials", "judge.api_key", "x-api-key"])
def test_credential_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["max_tokens", "n_tokens", "prompt_tokens", "completion_tokens", "api_key_env",
                                  "token_env", "cache_key", "item_key", "cell_key", "key_field", "model", "base_url",
                                  "keyframes", "monkey", "tokenizer", "author"])
def test_names_that_are_not_credentials(name):
    assert not is_secret_name(name)


def test_redact_blanks_values_under_secret_names_at_any_depth_and_keeps_the_rest():
    obj = {"judges": [{"name": "openai", "params": {"api_key": "sk-abcdef123", "max_tokens": 64,
                                                     "api_key_env": "OPENAI_API_KEY", "model": "m"}}],
           "token": "", "seed": 3}
    out = redact(obj)
    assert out["judges"][0]["params"] == {"api_key": REDACTED, "max_tokens": 64, "api_key_env": "OPENAI_API_KEY",
                                          "model": "m"}
    assert out["token"] == "" and out["seed"] == 3
    assert obj["judges"][0]["params"]["api_key"] == "sk-abcdef123"  # a copy: the caller's object is untouched
    # the value is remembered: the same key elsewhere in free text is blanked too
    assert redact_text("request failed for key sk-abcdef123") == f"request failed for key {REDACTED}"


def test_redact_argv_forms():
    argv = ["capeval", "judge", "--judge-option", "api_key=sk-111111", "--api-key", "sk-222222", "--token=sk-333333",
            "--judge-option", "max_tokens=64", "--judge-option", "model=gpt"]
    out = redact_argv(argv)
    assert out == ["capeval", "judge", "--judge-option", f"api_key={REDACTED}", "--api-key", REDACTED,
                   f"--token={REDACTED}", "--judge-option", "max_tokens=64", "--judge-option", "model=gpt"]


@pytest.mark.parametrize("text", [
    "Authorization: Bearer sk-live-0123456789",
    "headers={'Authorization': 'Bearer sk-live-0123456789'}",
    '{"api_key": "sk-live-0123456789", "model": "m"}',
    "api_key='sk-live-0123456789'",
    "password = \"two words sk-live-0123456789\"",
    "HTTPConfig(model='m', api_key='sk-live-0123456789', base_url=None)",
])
def test_redact_text_blanks_credentials_in_headers_json_and_reprs(text):
    S._seen.discard("sk-live-0123456789")  # found by its form, not because it was seen before
    out = redact_text(text)
    assert "sk-live-0123456789" not in out and REDACTED in out


def test_redact_text_keeps_counts_and_plain_words():
    text = "max_tokens=64 n_tokens: 12 model=gpt-4 the key point is clear"
    assert redact_text(text) == text


def test_credential_environment_variables_are_blanked_anywhere(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-987654")
    assert redact_text("sent sk-from-env-987654 to the server") == f"sent {REDACTED} to the server"
    assert redact(["x sk-from-env-987654"]) == [f"x {REDACTED}"]


def test_short_placeholders_are_not_blanked_inside_other_text():
    S.remember_secret("EMPTY")
    S.remember_secret("abc")
    assert redact_text("EMPTY abc") == "EMPTY abc"


def test_without_secrets_drops_credentials_only():
    params = {"api_key": "sk-x", "api_key_env": "OPENAI_API_KEY", "max_tokens": 5, "model": "m"}
    assert without_secrets(params) == {"api_key_env": "OPENAI_API_KEY", "max_tokens": 5, "model": "m"}
