"""A replay judge that answers slowly and logs every request key it answers (one line each, flushed): the kill -9
test counts from the log what each run actually sent to the backend. Registered as `slow-replay` on import."""

from __future__ import annotations

import time

from capeval.adapters.replay import ReplayJudge
from capeval.engine.params import REQUIRED, Param
from capeval.engine.registry import register


@register("judge", "slow-replay")
class SlowReplay(ReplayJudge):
    params = ReplayJudge.params + (Param("log", (str,), REQUIRED, "the file each answered request key is logged to"),
                                   Param("delay_s", (float,), 0.0, "seconds before each answer"))

    def __init__(self, replies, log: str, delay_s: float = 0.0, **kwargs):
        super().__init__(replies, **kwargs)
        self.log, self.delay_s = log, float(delay_s)
        self.name = "replay"  # the same judge identity as the plain replay judge: the same cache keys

    def judge(self, requests):
        out = []
        for r in requests:
            time.sleep(self.delay_s)
            out.extend(super().judge([r]))
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(f"{r.meta.get('step')} {r.key}\n")
        return out
