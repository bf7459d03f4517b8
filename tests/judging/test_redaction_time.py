"""Redaction reads untrusted text (captions, judge replies, error messages), so its time grows linearly with the
text: a 200,000-character word, a run of `a=a=…`, of quotes, of dotted names, a URL with a long query and a long
scheme-like run before a URL are each redacted well under a second (the patterns that retried a match from every
position inside a word took ~1 s for 8,000 characters and minutes for these). Each case runs in a child process with a
wall-clock limit, so a slow pattern fails the test instead of stalling it; redaction is also checked to still happen
next to the long text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
N = 200_000
CHILD_LIMIT_S = 60
PER_CASE_LIMIT_S = 1.0  # linear redaction takes ~0.1 s per case here; the quadratic one took minutes

CASES = {
    "word": "a" * N,
    "pairs": "a=" * (N // 2),
    "double quotes": '"' * N,
    "single quotes": "'" * N,
    "dotted name": "a.b" * (N // 3),
    "colons": "a:" * (N // 2),
    "leading underscores": "1_" * (N // 2),
    "url query": "http://h/?" + "a" * N,
    "url fragment": "http://h/#" + "a" * N,
    "scheme-like run before a url": "a." * (N // 2) + " x://y",
}

CHILD = r"""
import json, sys, time
from capeval.engine.secrets import REDACTED, redact_text
cases = json.loads(sys.stdin.read())
times = {}
for name, text in cases.items():
    start = time.perf_counter()
    out = redact_text(text + " api_key=sk-abcdef123456 http://u:pw123456@h/?token=tok123456")
    times[name] = time.perf_counter() - start
    assert out.startswith(text), name
    assert "sk-abcdef123456" not in out and "pw123456" not in out and "tok123456" not in out, name
    assert out.count(REDACTED) == 3, (name, out[-120:])
print(json.dumps(times))
"""


@pytest.mark.timeout(CHILD_LIMIT_S + 30)
def test_redaction_time_is_linear_in_the_text():
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    try:
        done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(CASES), capture_output=True, text=True,
                              cwd=REPO, env=env, timeout=CHILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"redacting {len(CASES)} texts of {N:,} characters took over {CHILD_LIMIT_S} s")
    assert done.returncode == 0, done.stderr[-3000:]
    times = json.loads(done.stdout.strip().splitlines()[-1])
    slow = {name: round(t, 3) for name, t in times.items() if t > PER_CASE_LIMIT_S}
    assert not slow, f"redaction over {PER_CASE_LIMIT_S} s for {N:,} characters: {slow}"
