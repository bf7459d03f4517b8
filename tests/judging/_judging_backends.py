"""Small real judge backends for the judging tests (test doubles for the BACKEND only: the runner, cache and parsers
under test are the real ones). They answer deterministically from the request content and record every request
they receive (optionally appending keys to a file, so a killed subprocess leaves a trace)."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from capeval.adapters.base import JudgeRequest, JudgeResponse


def _h(*parts) -> int:
    return int(hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:8], 16)


class ScriptedJudge:
    """Answers each request with a valid output for its structured spec (a choice, or JSON for the schema's
    required fields), chosen by a hash of the request key. `malformed_first` makes the first answer to every
    non-re-ask request malformed, to exercise repairs and re-asks."""

    def __init__(self, name="scripted-judge", revision="r1", *, log_path: str | Path | None = None,
                 delay_s: float = 0.0, malformed: str | None = None, fail_keys: set[str] | None = None):
        self.name, self.revision = name, revision
        self.calls: list[list[str]] = []
        self.log_path = Path(log_path) if log_path else None
        self.delay_s, self.malformed, self.fail_keys = delay_s, malformed, fail_keys or set()

    @property
    def asked(self) -> list[str]:
        return [k for batch in self.calls for k in batch]

    def answer_text(self, r: JudgeRequest) -> str:
        if self.malformed is not None and r.temperature == 0.0:
            return self.malformed
        if r.choices:
            return r.choices[_h(r.key) % len(r.choices)]
        schema = json.loads(r.json_schema) if r.json_schema else {}
        if schema.get("type") == "array":
            return json.dumps([f"event {i}" for i in range(1 + _h(r.key) % 3)])
        out = {}
        for name, spec in schema.get("properties", {}).items():
            if "enum" in spec:
                out[name] = spec["enum"][_h(r.key, name) % len(spec["enum"])]
            elif spec.get("type") == "integer":
                lo, hi = spec.get("minimum", 0), spec.get("maximum", 1)
                out[name] = lo + _h(r.key, name) % (hi - lo + 1)
            elif spec.get("type") == "array":
                items = spec.get("items", {})
                out[name] = [items["enum"][_h(r.key, name) % len(items["enum"])]] if "enum" in items else ["x"]
            elif name in ("object_number", "object_color"):  # CAPability's copied "{object}: {value}" field
                out[name] = "thing: 2"
            else:
                out[name] = "because 2"
        return json.dumps(out) if schema else f"free-text answer {_h(r.key) % 100}"

    def judge(self, requests):
        self.calls.append([r.key for r in requests])
        if self.log_path:
            with open(self.log_path, "a") as f:
                f.write("".join(r.key + "\n" for r in requests))
                f.flush()
        if self.delay_s:
            time.sleep(self.delay_s)
        return [JudgeResponse(key=r.key, text=None, error="injected backend failure") if r.key in self.fail_keys
                else JudgeResponse(key=r.key, text=self.answer_text(r), prompt_tokens=len(r.user) // 4,
                                   completion_tokens=3) for r in requests]

    def close(self):
        pass


class StreamingScriptedJudge(ScriptedJudge):
    """ScriptedJudge with `stream()`: keeps up to max_in_flight requests running on threads, each answered after a
    random delay (seeded), yielded in completion order. Records the order in which requests were taken."""

    def __init__(self, *args, max_delay_s: float = 0.01, seed: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_delay_s, self.seed = max_delay_s, seed
        self.taken: list = []  # JudgeRequests in the order the stream took them
        self.peak_in_flight = 0

    def _one(self, request, delay):
        time.sleep(delay)
        return ScriptedJudge.judge(self, [request])[0]

    def stream(self, feed, max_in_flight):
        import random
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        rng = random.Random(self.seed)
        with ThreadPoolExecutor(max_in_flight) as pool:
            running = set()
            while True:
                room = max_in_flight - len(running)
                for r in feed.take(room) if room > 0 else []:
                    self.taken.append(r)
                    running.add(pool.submit(self._one, r, rng.random() * self.max_delay_s))
                self.peak_in_flight = max(self.peak_in_flight, len(running))
                if not running:
                    if feed.closed:
                        return
                    time.sleep(0.001)
                    continue
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    yield f.result()
