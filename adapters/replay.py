"""A judge that answers from a recording: `--judge replay --judge-option replies=FILE.jsonl`.

Each line of the file is one recorded reply:

    {"item_id": "...", "step": "judge", "sub_index": 0, "seed": 0, "attempt": 0, "text": "..."}

`sub_index`, `seed` and `task` are optional (absent = any; `task` tells apart items whose ids repeat across
tasks, e.g. a benchmark's action items that reuse its event videos' file ids); `attempt` is 0 for the first ask
and k for the k-th re-ask;
`text` null means the backend returned no content (the request then fails like an empty API answer). A request with
no recorded reply fails with an error naming what was looked up, so a re-scoring run never invents an answer.

It serves two purposes: re-scoring a recorded judge run under other rules (official vs strict mode, another parser
version), and conformance tests that run scripted replies through the production path (render -> judge -> parse ->
metrics) and compare with the official code's outcome on the same replies.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

from capeval.adapters.base import JudgeRequest, JudgeResponse
from capeval.engine.params import REQUIRED, Param

_ANY = object()


def _key(item_id, step, sub_index, seed, attempt) -> tuple:
    return (str(item_id), str(step or ""), sub_index, seed, int(attempt))


class ReplayJudge:
    """Answers each request with the recorded reply for (item_id, step, sub_index, seed, attempt)."""

    params = (Param("replies", (), REQUIRED, "the recorded replies: a JSONL file or a list of dicts"),
              Param("name", (str,), "replay", "judge name recorded in verdicts"),
              Param("revision", (str, type(None)), None, "part of every cache key (default: 'replay:' + a digest of the replies)"))

    def __init__(self, replies: str | Path | list[dict], name: str = "replay", revision: str | None = None):
        if isinstance(replies, (str, Path)):
            path = Path(replies)
            if not path.is_file():
                raise FileNotFoundError(f"replay judge: replies file not found: {path}")
            raw = path.read_bytes()
            records = []
            for n, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: not JSON: {exc}") from None
                records.append((f"{path}:{n}", rec))
            digest = hashlib.sha256(raw).hexdigest()[:16]
        else:
            records = [(f"replies[{i}]", r) for i, r in enumerate(replies)]
            digest = hashlib.sha256(json.dumps(replies, sort_keys=True).encode()).hexdigest()[:16]
        self.name = name
        # The recording's content is the judge's identity: another recording never shares cached judgments.
        self.revision = revision or f"replay:{digest}"
        self._replies: dict[tuple, str | None] = {}
        for where, rec in records:
            if not isinstance(rec, dict):
                raise ValueError(f"{where}: expected an object")
            for required in ("item_id", "text"):
                if required not in rec:
                    raise ValueError(f"{where}: field {required!r} is required")
            if rec["text"] is not None and not isinstance(rec["text"], str):
                raise ValueError(f"{where}: field 'text' must be a string or null")
            sub = rec.get("sub_index")
            seed = rec.get("seed")
            key = (_ANY if rec.get("task") is None else str(rec["task"]),) + _key(
                rec["item_id"], rec.get("step"), _ANY if sub is None else int(sub),
                _ANY if seed is None else int(seed), int(rec.get("attempt", 0)))
            if key in self._replies:
                raise ValueError(f"{where}: a second reply for item {rec['item_id']!r}, step {rec.get('step')!r}, "
                                 f"sub_index {sub}, seed {seed}, attempt {rec.get('attempt', 0)}")
            self._replies[key] = rec["text"]
        self.calls = 0

    def _lookup(self, meta, task: str | None = None) -> tuple[bool, str | None]:
        item, step = meta.get("item_id"), meta.get("step")
        sub, seed, attempt = int(meta.get("sub_index") or 0), int(meta.get("seed") or 0), int(meta.get("attempt") or 0)
        parts = (task or "").split("/")  # JudgeRequest.task is "<protocol>/<task>/<step>"
        tasks = (parts[1], _ANY) if len(parts) >= 3 and parts[1] else (_ANY,)
        for t in tasks:
            for s in (sub, _ANY):
                for sd in (seed, _ANY):
                    k = (t,) + _key(item, step, s, sd, attempt)
                    if k in self._replies:
                        return True, self._replies[k]
        return False, None

    def judge(self, requests: Sequence[JudgeRequest]) -> list[JudgeResponse]:
        out = []
        for r in requests:
            self.calls += 1
            found, text = self._lookup(r.meta or {}, r.task)
            if not found:
                m = r.meta or {}
                out.append(JudgeResponse(r.key, None, error=(
                    f"replay: no recorded reply for item {m.get('item_id')!r} step {m.get('step')!r} sub_index "
                    f"{m.get('sub_index')} seed {m.get('seed')} attempt {m.get('attempt')}")))
            elif text is None:
                out.append(JudgeResponse(r.key, None, error="replay: recorded reply has no content"))
            else:
                out.append(JudgeResponse(r.key, text))
        return out

    def close(self) -> None:
        pass
