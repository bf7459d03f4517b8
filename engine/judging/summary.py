"""JudgingSummary: what one judging run (or one sweep cell) did, counted as it goes and printed at the end."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class JudgingSummary:
    requests: int = 0  # verdict rows produced (all steps)
    sent: int = 0  # requests actually sent to the judge (re-asks included)
    hedged: int = 0  # copies of sent requests the judge added in the drain (tail hedging), beyond `sent`
    cached: int = 0  # answered from the judgment cache
    reasks: int = 0
    parse_failures: int = 0
    repaired: int = 0
    errors: int = 0
    missing: int = 0
    prompt_tokens: int = 0  # of the requests sent in this run
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    steps: dict = field(default_factory=dict)

    @property
    def cached_prompt_share(self) -> float:
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "cached_prompt_share": round(self.cached_prompt_share, 4)}

    def __str__(self) -> str:
        hedged = f", hedge copies {self.hedged}" if self.hedged else ""
        return (f"{self.requests} verdicts | sent {self.sent} (re-asks {self.reasks}{hedged}), cached {self.cached} | "
                f"parse failures {self.parse_failures}, repaired {self.repaired}, errors {self.errors}, "
                f"missing {self.missing} | tokens: prompt {self.prompt_tokens} "
                f"({self.cached_prompt_share:.0%} prefix-cached), completion {self.completion_tokens} | "
                f"{self.wall_s:.1f}s")
