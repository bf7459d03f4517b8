"""Credentials never reach disk: names of secret parameters, and redaction of values, argv and text.

A credential is a parameter whose name says so (`api_key`, `token`, `secret`, `password`, `credentials`, and names
built from them such as `hf_token` or `aws_secret_access_key`) and whose value is text. Counts such as
`max_tokens` or `n_tokens` are numbers, and names ending in `_env` hold the *name* of an environment variable
(`api_key_env = "OPENAI_API_KEY"`), which is how capeval wants credentials given: neither is redacted.

Every writer of a run record, staged job, log line, report or cache key passes what it writes through `redact`
(objects) or `redact_text` / `redact_argv` (strings): a value under a secret name becomes `REDACTED`, and any
secret value seen so far in this process, or held by a credential environment variable, is blanked out wherever
else it appears (e.g. inside `--judge-option api_key=sk-...` in argv). Hand-written because no kept library knows
capeval's parameter names; the rules are small and tested (tests/judging/test_secrets.py).
"""

from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "***REDACTED***"

_SECRET_WORDS = re.compile(r"(?:^|[_\-.])(api[_\-]?key|key|keys|token|tokens|secret|secrets|password|passwd|"
                           r"credential|credentials|auth|authorization|bearer)(?:$|[_\-.])", re.IGNORECASE)
#: names that contain a secret word but count or configure something (values may still be strings, e.g. "64")
_NOT_SECRET = re.compile(r"^(max|min|n|num|total|prompt|completion|reasoning|cached|output|input)_tokens?$|"
                         r"_env$|^key_?(field|column|name|by)s?$|^(cache|content|cell|item)_key$", re.IGNORECASE)
#: environment variables whose values are credentials wherever they show up
CREDENTIAL_ENV = ("CAPEVAL_JUDGE_API_KEY", "CAPEVAL_CAPTIONER_API_KEY", "OPENAI_API_KEY", "HF_TOKEN",
                  "HUGGING_FACE_HUB_TOKEN", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
                  "AZURE_OPENAI_API_KEY", "RAY_AUTH_TOKEN", "WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN",
                  "MLFLOW_TRACKING_PASSWORD")
_MIN_SECRET_LEN = 6  # shorter values ("EMPTY"-like placeholders, "x") are not blanked inside other text

_seen: set[str] = set()


def is_secret_name(name: Any) -> bool:
    """True when a parameter of this name holds a credential (see the module doc)."""
    text = str(name)
    return bool(_SECRET_WORDS.search(text)) and not _NOT_SECRET.search(text)


def remember_secret(value: Any) -> None:
    """Blank this value out of everything redacted later in this process (e.g. a key read from an env var)."""
    if isinstance(value, str) and len(value) >= _MIN_SECRET_LEN and value not in {"EMPTY", REDACTED}:
        _seen.add(value)


def _known_values() -> list[str]:
    values = set(_seen)
    for name in CREDENTIAL_ENV:
        value = os.environ.get(name)
        if value and len(value) >= _MIN_SECRET_LEN and value != "EMPTY":
            values.add(value)
    return sorted(values, key=len, reverse=True)  # longest first: a key containing another is blanked whole


#: query (or fragment) parameters that carry a credential in a URL besides the secret names (`api-key`, `key`,
#: `token`, `access_token`, ...): signed-URL and SAS signatures, OAuth codes, short password spellings
URL_SECRET_PARAMS = frozenset({"sig", "signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token",
                               "x-goog-signature", "x-goog-credential", "code", "pass", "pwd", "session"})
#: a URL with a scheme, up to white space, a quote or a closing bracket that cannot belong to it. Redaction reads
#: untrusted text, so every pattern here runs in linear time: a match is tried only where a run of scheme (or name)
#: characters begins, never again from each position inside it (which made one long word cost seconds), and `lead`
#: keeps the characters before the scheme's first letter at a word boundary (`-http://`, `_x+http://`)
_URL = re.compile(r"(?<![A-Za-z0-9+.\-])(?=[A-Za-z0-9+.\-]*+://[^\s\"'<>`])(?P<lead>[A-Za-z0-9+.\-]*?)"
                  r"(?P<url>\b[A-Za-z][A-Za-z0-9+.\-]*+://[^\s\"'<>`]+)")
_URL_PARAM = re.compile(r"(?<![^&;=#?])(?P<name>[^&;=#?]+)=(?P<value>[^&;#]*)")


def is_url_secret_param(name: str) -> bool:
    """True when a URL query parameter of this name carries a credential (its name percent-decoded)."""
    from urllib.parse import unquote

    plain = unquote(name).strip()
    return plain.lower() in URL_SECRET_PARAMS or (is_secret_name(plain) and not plain.lower().endswith("_env"))


def redact_url(url: str) -> str:
    """`url` with its credentials blanked: the userinfo (`user:key@`) whole, and the values of query and fragment
    parameters that name a key, token or signature (`?api-key=`, `&token=`, `#access_token=`, `sig=`); each value
    blanked is remembered, so it is blanked wherever else it shows up. Everything else is kept as written."""
    if not isinstance(url, str) or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    cut = min((i for i in (rest.find(c) for c in "/?#") if i != -1), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        userinfo, host = authority.rsplit("@", 1)
        user, _, password = userinfo.partition(":")
        remember_secret(password or user)  # a user name beside a password is no secret (it may name a home folder)
        authority = f"{REDACTED}@{host}"

    def blank(m: re.Match) -> str:
        if not is_url_secret_param(m.group("name")) or not m.group("value") or m.group("value") == REDACTED:
            return m.group(0)
        remember_secret(m.group("value"))
        return f"{m.group('name')}={REDACTED}"

    path, mark, params = tail, "", ""
    for sep in ("?", "#"):
        if sep in tail:
            i = tail.index(sep)
            path, mark, params = tail[:i], sep, tail[i + 1:]
            break
    return f"{scheme}://{authority}{path}{mark}{_URL_PARAM.sub(blank, params)}" if mark else \
        f"{scheme}://{authority}{path}"


def redact_urls(text: str) -> str:
    """`text` with every URL in it passed through `redact_url` (nothing else changed)."""
    if not isinstance(text, str) or "://" not in text:
        return text
    return _URL.sub(lambda m: m.group("lead") + redact_url(m.group("url")), text)


def redact_message(text: str) -> str:
    """An error or warning message with the credentials of its URLs and every known secret value blanked; unlike
    `redact_text` it leaves `name: value` pairs alone, so "api_key: no API key given" keeps its meaning."""
    if not isinstance(text, str) or not text:
        return text
    text = redact_urls(text)
    for value in _known_values():
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redact_text(text: str) -> str:
    """`text` with the credentials of every URL in it blanked (redact_url), every known secret value replaced by
    REDACTED, and `name=value` / `name: value` pairs whose name is a secret name blanked."""
    if not isinstance(text, str) or not text:
        return text
    text = redact_message(text)
    text = _SCHEME.sub(lambda m: f"{m.group('scheme')}{m.group('space')}{REDACTED}", text)
    return _PAIR.sub(_blank_pair, text)


#: `name=value`, `name: value`, `"name": "value"` (JSON, reprs of dicts and dataclasses); a quoted value is blanked
#: whole, up to its closing quote (a password may hold spaces). The name is the run of name characters from its first
#: letter (`lead` keeps the digits, `_`, `.` and `-` before it), tried only where such a run begins (linear time, as
#: `_URL`)
_PAIR = re.compile(r"(?<![A-Za-z0-9_.\-])(?P<lead>[0-9_.\-]*)(?P<name>[A-Za-z][A-Za-z0-9_.\-]*)(?P<nq>[\"']?)(?P<sep>\s*[=:]\s*)"
                   r"(?:(?P<quote>[\"'])(?P<qvalue>[^\"'\n]*)(?P=quote)|(?P<value>[^\s\"',})\]]+))")
#: an HTTP Authorization value: the scheme stays, the credential after it goes
_SCHEME = re.compile(r"(?i)\b(?P<scheme>bearer|basic)(?P<space>\s+)(?P<cred>[A-Za-z0-9._~+/=\-]{6,})")


def _blank_pair(m: re.Match) -> str:
    name = m.group("name").rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    value = m.group("qvalue") if m.group("quote") else m.group("value")
    if not is_secret_name(name) or not value or REDACTED in value or value.isdigit() or \
            value.lower() in ("bearer", "basic"):  # a scheme whose credential _SCHEME has blanked
        return m.group(0)
    quote = m.group("quote") or ""
    return f"{m.group('lead')}{m.group('name')}{m.group('nq')}{m.group('sep')}{quote}{REDACTED}{quote}"


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with credentials blanked: `--api-key X`, `--token=X`, `KEY=VALUE` options naming a secret."""
    out: list[str] = []
    blank_next = False
    for arg in argv:
        if blank_next:
            out.append(REDACTED)
            blank_next = False
            continue
        if arg.startswith("--") and is_secret_name(arg[2:].split("=", 1)[0].replace("-", "_")):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                blank_next = True
            continue
        out.append(redact_text(arg))
    return out


def redact(obj: Any) -> Any:
    """A copy of a JSON-like object (dicts, lists, strings, numbers) with credentials blanked (see the module doc).
    Values under secret names are remembered, so the same value elsewhere (argv, a log line) is blanked too."""
    _collect(obj)
    return _redact(obj)


def _collect(obj: Any) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if is_secret_name(k) and isinstance(v, str):
                remember_secret(v)
            else:
                _collect(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _collect(v)


def _redact(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: (REDACTED if is_secret_name(k) and isinstance(v, str) and v else _redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_redact(v) for v in obj)
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def without_secrets(params: dict) -> dict:
    """Parameters with every credential dropped: what may enter a cache key or an identity (a key rotated must not
    change what a judge's answers are keyed by, and must never be hashed into a file name)."""
    return {k: v for k, v in params.items() if not (is_secret_name(k) and isinstance(v, str))}
