"""run_judging: requests -> judge (through the judgment cache) -> parsed VERDICTS, with re-asks and multi-step flows.

Order of work per step: look up every request key in the cache; send only the misses, in batches that follow the
request order (sorted by caption, so requests sharing a prompt prefix are adjacent for vLLM's prefix cache); commit
each finished batch to the cache before sending the next (a kill -9 loses at most the batch in flight); parse; re-ask
malformed answers up to `max_reasks` times (each re-ask is itself cached under a derived key); then ask the protocol
for the next step's requests (VidCapBench answer -> score, LVCap extract -> entail) built from the parsed outputs.
Every request row yields exactly one verdict row: parsed, REPAIRED, FAILED (judge answered, nothing parseable),
ERROR (backend failed) or MISSING (no caption / upstream step failed). Nothing is dropped.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from engine.protocols.base import REQUESTS_WITH_CONTEXT, JudgeProtocol, parse_context
from engine.schemas import NO_VERDICT, VERDICTS, ParseStatus, conform
from engine.store.judgment_cache import CachedResponse, JudgmentCache

from .requests import to_judge_request


@dataclass
class JudgingSummary:
    requests: int = 0  # verdict rows produced (all steps)
    sent: int = 0  # requests actually sent to the judge (re-asks included)
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
        return (f"{self.requests} verdicts | sent {self.sent} (re-asks {self.reasks}), cached {self.cached} | "
                f"parse failures {self.parse_failures}, repaired {self.repaired}, errors {self.errors}, "
                f"missing {self.missing} | tokens: prompt {self.prompt_tokens} "
                f"({self.cached_prompt_share:.0%} prefix-cached), completion {self.completion_tokens} | "
                f"{self.wall_s:.1f}s")


class _Answerer:
    """Answers JudgeRequests from the cache or the judge, batch by batch, committing each batch."""

    def __init__(self, judge, cache: JudgmentCache, batch_size: int, summary: JudgingSummary, progress: bool):
        self.judge, self.cache, self.batch_size = judge, cache, max(1, int(batch_size))
        self.summary, self.progress = summary, progress

    def answer(self, requests: list, desc: str) -> dict[str, CachedResponse | str]:
        """key -> CachedResponse, or an error message for backend failures (not cached: a rerun retries them)."""
        unique = list({r.key: r for r in requests}.values())
        results: dict[str, CachedResponse | str] = dict(self.cache.get_many(r.key for r in unique))
        self.summary.cached += len(results)
        todo = [r for r in unique if r.key not in results]
        from tqdm.auto import tqdm

        with tqdm(total=len(unique), initial=len(results), desc=desc, unit="req", disable=not self.progress,
                  dynamic_ncols=True) as bar:
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start : start + self.batch_size]
                try:
                    responses = self.judge.judge(batch)
                    if len(responses) != len(batch):
                        raise RuntimeError(f"judge returned {len(responses)} responses for {len(batch)} requests")
                except Exception as exc:  # a failed batch becomes ERROR rows; the run goes on
                    responses = None
                    for r in batch:
                        results[r.key] = f"{type(exc).__name__}: {exc}"
                self.summary.sent += len(batch)
                good = []
                for req, resp in zip(batch, responses or []):
                    self.summary.prompt_tokens += resp.prompt_tokens or 0
                    self.summary.cached_prompt_tokens += resp.cached_prompt_tokens or 0
                    self.summary.completion_tokens += resp.completion_tokens or 0
                    if resp.text is None:
                        results[req.key] = resp.error or "backend returned no text"
                        continue
                    cr = CachedResponse(req.key, self.judge.name, resp.text, resp.prompt_tokens or 0,
                                        resp.cached_prompt_tokens or 0, resp.completion_tokens or 0,
                                        float(resp.latency_s or 0.0), float(resp.cost_usd or 0.0))
                    results[req.key] = cr
                    good.append(cr)
                self.cache.put_many(good)  # committed before the next batch is sent
                bar.update(len(batch))
                bar.set_postfix(sent=self.summary.sent, cached=self.summary.cached, refresh=False)
        return results


def _verdict_row(req: dict, judge_name: str) -> dict:
    return {k: req.get(k) for k in ("request_key", "protocol", "task", "item_id", "video_id", "captioner",
                                    "prompt_id", "frame_spec", "step", "sub_index", "seed", "trial")} | {
        "judge": judge_name}


def _judge_step(rows: list[dict], protocol: JudgeProtocol, answerer: _Answerer, max_reasks: int,
                summary: JudgingSummary, step: str) -> list[dict]:
    out: list[dict | None] = [None] * len(rows)
    pending = []  # indices that need the judge
    for i, req in enumerate(rows):
        missing = parse_context(req).get("parse", {}).get("missing")
        if missing:
            status = parse_context(req)["parse"].get("upstream_status", int(ParseStatus.MISSING))
            out[i] = _verdict_row(req, answerer.judge.name) | {
                "verdict": NO_VERDICT, "parse_status": int(status), "error": missing}
        else:
            pending.append(i)
    attempt = 0
    while pending and attempt <= max_reasks:
        reqs = [to_judge_request(rows[i], attempt=attempt) for i in pending]
        desc = f"judge {protocol.name}/{step}" + (f" re-ask {attempt}" if attempt else "")
        if attempt:
            summary.reasks += len(reqs)
        answers = answerer.answer(reqs, desc)
        still_failed = []
        for i, jr in zip(pending, reqs):
            ans = answers[jr.key]
            row = _verdict_row(rows[i], answerer.judge.name)
            if isinstance(ans, str):
                out[i] = row | {"verdict": NO_VERDICT, "parse_status": int(ParseStatus.ERROR), "error": ans}
                continue
            code, status, detail = protocol.parse(rows[i], ans.text)
            if attempt and status == ParseStatus.OK:
                status = ParseStatus.REPAIRED  # parsed only after a re-ask
            out[i] = row | {"raw_output": ans.text, "verdict": int(code), "parse_status": int(status),
                            "detail": detail if status != ParseStatus.FAILED else None,
                            "error": detail if status == ParseStatus.FAILED else None,
                            "prompt_tokens": ans.prompt_tokens, "cached_prompt_tokens": ans.cached_prompt_tokens,
                            "completion_tokens": ans.completion_tokens, "latency_s": ans.latency_s}
            if status == ParseStatus.FAILED:
                still_failed.append(i)
        pending, attempt = still_failed, attempt + 1
    for row in out:
        summary.parse_failures += row["parse_status"] == ParseStatus.FAILED
        summary.repaired += row["parse_status"] == ParseStatus.REPAIRED
        summary.errors += row["parse_status"] == ParseStatus.ERROR
        summary.missing += row["parse_status"] == ParseStatus.MISSING
    return out  # type: ignore[return-value]


def run_judging(requests: pa.Table, judge, *, cache_dir: str | Path, protocol: JudgeProtocol | str | None = None,
                batch_size: int = 64, max_reasks: int = 2, progress: bool = True, max_steps: int = 8,
                keep_intermediate: bool = False, return_summary: bool = False):
    """Judge `requests` (from protocol.build_requests) with `judge` (adapters.base.Judge); returns VERDICTS (one row
    per request of every step), or (verdicts, JudgingSummary) with return_summary=True. The summary is also in the
    table's schema metadata under b"capeval.judging_summary".

    Rows of intermediate steps (protocol.intermediate_steps: VidCapBench "answer", LVCap "extract") carry no verdict
    code; they are left out unless keep_intermediate=True. Nothing is lost: their text is in the judgment cache and
    in the next step's `detail`, and a failed intermediate step yields a next-step row without a verdict whose
    parse_status says why."""
    from engine.registry import lookup

    t0 = time.perf_counter()
    if protocol is None:
        names = set(requests.column("protocol").to_pylist()) if requests.num_rows else set()
        if len(names) != 1:
            raise ValueError(f"pass protocol=: requests hold protocols {sorted(names)}")
        protocol = names.pop()
    if isinstance(protocol, str):
        protocol = lookup("protocol", protocol)
    if "context" not in requests.column_names:
        raise ValueError("requests lack the 'context' column: build them with protocol.build_requests")
    requests = conform(requests, REQUESTS_WITH_CONTEXT)
    summary = JudgingSummary()
    tables = []
    with JudgmentCache(cache_dir) as cache:
        answerer = _Answerer(judge, cache, batch_size, summary, progress)
        step_requests, n_steps = requests, 0
        while step_requests.num_rows and n_steps < max_steps:
            rows = step_requests.to_pylist()
            steps = sorted({r["step"] or "" for r in rows})
            verdict_rows = _judge_step(rows, protocol, answerer, max_reasks, summary, "+".join(steps))
            verdicts = pa.Table.from_pylist(verdict_rows, schema=_nullable(VERDICTS))
            intermediate = pa.array(list(getattr(protocol, "intermediate_steps", ())), pa.string())
            if not keep_intermediate and len(intermediate):
                verdicts_out = verdicts.filter(pc.invert(pc.fill_null(pc.is_in(verdicts.column("step"), intermediate),
                                                                      False)))
            else:
                verdicts_out = verdicts
            tables.append(verdicts_out)
            for s in steps:
                summary.steps[s] = summary.steps.get(s, 0) + sum(1 for r in rows if (r["step"] or "") == s)
            step_requests = protocol.next_requests(step_requests, verdicts, judge=judge.name,
                                                   judge_revision=judge.revision)
            if step_requests.num_rows:
                step_requests = conform(step_requests, REQUESTS_WITH_CONTEXT)
            n_steps += 1
    table = pa.concat_tables(tables) if tables else _nullable(VERDICTS).empty_table()
    table = conform(table, VERDICTS)
    summary.requests = table.num_rows
    summary.wall_s = time.perf_counter() - t0
    table = table.replace_schema_metadata({b"capeval.judging_summary": json.dumps(summary.as_dict()).encode()})
    return (table, summary) if return_summary else table


def _nullable(schema: pa.Schema) -> pa.Schema:
    """Row-building schema: identical types, all nullable (conform() then checks the required columns)."""
    return pa.schema([f.with_nullable(True) for f in schema])
