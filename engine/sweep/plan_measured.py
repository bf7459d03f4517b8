"""What an earlier run of a sweep measured, for `capeval plan` (engine/sweep/plan.py): the judge's request rate,
each judge's prefix-cache share, each protocol's re-ask share and the completion tokens each step took. Read from a
run folder (run.json and the verdict segments); a folder that does not exist measures nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from capeval.engine.runrecord import read_run_records


@dataclass
class Measured:
    path: Path | None = None
    found: bool = False
    judge_rate: float | None = None
    cached: dict = field(default_factory=dict)  # judge label -> cached prompt share
    reasks: dict = field(default_factory=dict)  # protocol name -> re-asks per verdict row
    completions: dict = field(default_factory=dict)  # (protocol name, step) -> mean completion tokens

    @classmethod
    def read(cls, run_dir) -> "Measured":
        if run_dir is None or not Path(run_dir).is_dir():
            return cls()
        out = cls(Path(run_dir))
        try:
            records = read_run_records(run_dir)
        except ValueError:
            records = []
        for rec in reversed(records):
            sent = ((rec.get("counts_by_status") or {}).get("judge_requests") or {}).get("sent") or 0
            if out.judge_rate is None and sent and (rec.get("throughput") or {}).get("judge_requests_per_s"):
                out.judge_rate = float(rec["throughput"]["judge_requests_per_s"])
            for label, u in ((rec.get("cost") or {}).get("judges") or {}).items():
                if label not in out.cached and u.get("prompt_tokens"):
                    out.cached[label] = u["cached_prompt_tokens"] / u["prompt_tokens"]
        out._read_verdicts(Path(run_dir) / "verdicts")
        out.found = bool(records) or bool(out.reasks)
        return out

    def _read_verdicts(self, folder: Path) -> None:
        import polars as pl

        paths = sorted(folder.glob("*.parquet")) if folder.is_dir() else []
        if not paths:
            return
        cols = ["protocol", "step", "attempt", "completion_tokens", "parse_status"]
        v = pl.concat([pl.read_parquet(p, columns=cols) for p in paths], how="diagonal_relaxed")
        asked = v.filter(pl.col("attempt").is_not_null())
        for r in asked.group_by("protocol").agg(pl.col("attempt").cast(pl.Int64).mean().alias("m")).iter_rows():
            self.reasks[r[0]] = float(r[1] or 0.0)
        ok = asked.filter(pl.col("completion_tokens").is_not_null() & (pl.col("parse_status") <= 1))
        for r in ok.group_by("protocol", "step").agg(pl.col("completion_tokens").mean()).iter_rows():
            self.completions[(r[0], r[1] or "")] = float(r[2])

    def completion(self, protocol: str, step: str | None) -> int | None:
        v = self.completions.get((protocol, step or ""))
        return None if v is None else max(1, round(v))

    def reask_share(self, protocol: str) -> float | None:
        return self.reasks.get(protocol)

    def cached_share(self, judge: str) -> float | None:
        return self.cached.get(judge)

    def rate(self) -> tuple[float | None, str]:
        if self.judge_rate:
            return self.judge_rate, f"measured by an earlier run in {self.path}"
        return None, "none: pass --rate REQ_PER_S (or --out of an earlier run)"
