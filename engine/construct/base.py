"""The shared machinery of construction pipelines: a pipeline is a sequence of generation steps, each step renders
chat requests from a pack prompt and sends them through a judge backend on the ordinary judging path.

Why the judging path (capeval.engine.judging.runner.run_judging) and not a loop of its own: it already streams requests
through a bounded window, stores every answer in the content-keyed judgment cache as it arrives (group commits that
survive kill -9), re-asks malformed answers per a JudgingPolicy and never sends a key another process holds. So a
construction run killed half-way and started again answers the finished requests from the cache and sends only the
rest: nothing that was generated is generated again, and the same pack + inputs + judge give the same keys.

A step is a small JudgeProtocol-like adapter (`StepProtocol`): its `parse` turns the model's reply into the generated
payload (JSON in the verdict row's `detail`), or fails with a reason (re-asked in strict mode). Every ask of a step is
an `Ask`; `run_step` returns one `Generated` per ask, in the asks' order. What a pipeline kept, filtered and why goes
into a `RecordLog`, written as `record.parquet` beside the items the pipeline produced (engine/construct/outputs.py).
"""

from __future__ import annotations

import enum
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from capeval.engine.keys import construct_tag, mode_tag, pack_tag, tagged_revision
from capeval.engine.packs import PromptPack
from capeval.engine.protocols.base import (JudgeProtocol, JudgingPolicy, Rendered, RequestContext, make_row,
                                          rows_to_table)
from capeval.engine.schemas import NO_VERDICT, ParseStatus


class GenerationCode(enum.IntEnum):
    """The one code of a generation row: something was generated (a failure is NO_VERDICT with its reason)."""

    GENERATED = 1


class ParseFailure(ValueError):
    """A reply a step cannot use; the message says why (kept in the record, and the reason a strict run re-asks)."""


@dataclass
class Ask:
    """One generation request of a step: a pack prompt filled with `fields`, for one unit (`item_id`).

    `appendix`: input sent after the rendered prompt, for prompts that take their input below the text (the paper's
    dedup prompt ends "process the following list" and has no slot). `backend_fields`: what structured and local
    backends answer from (capeval.adapters.base.JudgeRequest.fields); LLM backends read only the prompt. `context`: handed
    back to the step's parser with the reply. (item_id, sub_index, trial) must be unique within a step."""

    item_id: str
    video_id: str
    prompt_id: str
    fields: dict[str, Any] = field(default_factory=dict)
    task: str = "default"
    appendix: str | None = None
    choices: tuple[str, ...] | None = None
    json_schema: str | None = None
    max_tokens: int = 1024
    temperature: float | None = 0.0
    seed: int = 0
    trial: int = 0
    sub_index: int = 0
    frames_path: str | None = None
    images_digest: str | None = None
    backend_fields: dict[str, str] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)


@dataclass
class Generated:
    """What came back for one ask: `payload` (the step's parse) when ok, else `error` says why."""

    ask: Ask
    request_key: str
    ok: bool
    payload: Any = None
    raw: str | None = None
    error: str | None = None
    attempt: int = 0


class GenerationStep:
    """One step of a pipeline. Subclasses set `name` (the step, in keys and records), `protocol` (what the request
    rows name: backends route "<protocol>/<task>/<step>", e.g. to the protocol's stand-in answers in the local judge),
    `version` (enters every key: bump it when the rendering changes) and implement `parse`."""

    name: str = "generate"
    protocol: str = "construct"
    version: str = "1"
    #: the pack this step renders from when not the run's (e.g. a capeval prompt the official pack lacks)
    pack: PromptPack | None = None

    def parse(self, context: dict, text: str) -> Any:
        """The generated payload (JSON-serialisable) from the reply `text`; raise ParseFailure(why) when unusable."""
        raise NotImplementedError

    def policy(self, mode: str) -> JudgingPolicy:
        """Re-asks of malformed replies: strict re-asks twice at a raised temperature; official takes the first
        reply (the papers state no retry rule)."""
        if mode == "official":
            return JudgingPolicy(max_reasks=0, reask_temperature=None, mode="official")
        return JudgingPolicy(mode="strict")


class StepProtocol(JudgeProtocol):
    """A GenerationStep as the judge loop sees a protocol: parse -> (GENERATED, status, payload JSON)."""

    codes = (GenerationCode,)

    def __init__(self, step: GenerationStep, mode: str):
        self.step, self.mode = step, mode
        self.name, self.version = step.protocol, step.version

    def parse(self, request, text):
        ctx = RequestContext.decode(request.get("context")).parse
        try:
            payload = self.step.parse(ctx, text)
        except ParseFailure as exc:
            return NO_VERDICT, ParseStatus.FAILED, str(exc)
        return int(GenerationCode.GENERATED), ParseStatus.OK, json.dumps(payload, ensure_ascii=False)

    def judging_policy(self, mode: str = "strict", **params) -> JudgingPolicy:
        return self.step.policy(self.mode)


@dataclass
class StepStats:
    """Per step: asks, how many were answered from the cache vs sent, failures and their reasons (counted, the
    most frequent first); the run's record keeps them and `capeval construct` ends with them."""

    asks: int = 0
    sent: int = 0
    cached: int = 0
    failed: int = 0
    wall_s: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)

    def fail(self, reason: str | None, n: int = 1) -> None:
        """n failed asks, counted under `reason` (reasons differing only after their first 160 characters, e.g. in
        the reply they quote, count as one)."""
        self.failed += n
        key = " ".join(str(reason or "no reason given").split())[:160]
        self.reasons[key] = self.reasons.get(key, 0) + n

    def failure_share(self) -> float:
        return self.failed / self.asks if self.asks else 0.0

    def as_dict(self) -> dict:
        return {"asks": self.asks, "sent": self.sent, "cached": self.cached, "failed": self.failed,
                "wall_s": round(self.wall_s, 3),
                "failure_reasons": dict(sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0])))}


def failure_lines(stats: dict[str, StepStats], n_items: int, max_failure_share: float) -> list[str]:
    """Why a construction run failed, one line per reason, or [] when it did not: it built no item, or a step failed
    more than `max_failure_share` of its asks. Each failing step's line counts its reasons, the most frequent first."""
    lines = []
    for name, s in stats.items():
        if not s.asks or s.failure_share() <= max_failure_share:
            continue
        top = sorted(s.reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        said = "; ".join(f"{n} x {why}" for why, n in top[:3])
        rest = len(top) - 3
        lines.append(f"step {name}: {s.failed} of {s.asks} asks failed ({100 * s.failure_share():.1f}% > "
                     f"--max-failure-share {100 * max_failure_share:g}%): {said}"
                     + (f"; and {rest} other reason(s) (construct.json)" if rest > 0 else ""))
    if n_items == 0:
        failing = [f"{name} ({s.failed} of {s.asks} failed)" for name, s in stats.items() if s.failed]
        lines.insert(0, "no items were built" + (f"; failures by step: {', '.join(failing)}" if failing else
                                                  "; no step failed: every candidate was filtered out (record.parquet "
                                                  "says why)"))
    return lines


@dataclass
class ConstructContext:
    """What every step of a run shares: the mode, the pack, the cache, the judges (built once per label, closed at
    the end), progress output and per-step statistics."""

    pipeline: str
    mode: str
    pack: PromptPack
    cache_dir: Path
    #: role (a step name, or "*" for every step without its own) -> judge labels answering it
    roles: dict[str, list[str]] = field(default_factory=dict)
    #: label -> a new judge (capeval.adapters.base.Judge); called once per label, on first use
    factory: Callable[[str], Any] | None = None
    progress: bool = True
    max_in_flight: int | None = None  # None: each judge's own max_in_flight (capeval.engine.judging.window.judge_window)
    stats: dict[str, StepStats] = field(default_factory=dict)
    judges: dict[str, Any] = field(default_factory=dict)  # label -> built judge

    def judge(self, label: str):
        if label not in self.judges:
            if self.factory is None:
                raise ValueError(f"no judge labelled {label!r} and no factory to build one")
            self.judges[label] = self.factory(label)
        return self.judges[label]

    def labels_for(self, role: str) -> list[str]:
        labels = self.roles.get(role) or self.roles.get("*") or []
        if not labels:
            raise ValueError(f"no judge for step {role!r}: give --judge or --step-judge {role}=NAME")
        return list(labels)

    def judges_for(self, role: str) -> list[tuple[str, Any]]:
        """[(label, judge)] answering `role`, built on first use (a step not run never starts its judge)."""
        return [(label, self.judge(label)) for label in self.labels_for(role)]

    def log(self, message: str) -> None:
        print(f"[construct {self.pipeline}] {message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        for judge in self.judges.values():
            judge.close()
        self.judges.clear()


def render_asks(step: GenerationStep, asks: list[Ask], ctx: ConstructContext, judge) -> pa.Table:
    """The step's request rows (REQUESTS_WITH_CONTEXT), keyed by content: judge, pack digest, mode, step version and
    the rendered text enter every key."""
    seen: set[tuple] = set()
    pack = step.pack or ctx.pack
    revision = tagged_revision(judge.revision, construct_tag(ctx.pipeline, step.name, step.version),
                               pack_tag(pack.digest), mode_tag(ctx.mode))
    rows = []
    for ask in asks:
        ident = (ask.item_id, ask.sub_index, ask.trial)
        if ident in seen:
            raise ValueError(f"step {step.name}: two asks for item {ask.item_id!r} sub_index {ask.sub_index} "
                             f"trial {ask.trial}")
        seen.add(ident)
        system, user = pack.render(ask.prompt_id, **ask.fields)
        if ask.appendix:
            user = f"{user}\n\n{ask.appendix}"
        r = Rendered(task=ask.task, step=step.name, user=user, system=system, sub_index=ask.sub_index,
                     choices=ask.choices, json_schema=ask.json_schema, max_tokens=ask.max_tokens,
                     fields=dict(ask.backend_fields), parse=dict(ask.context), images_digest=ask.images_digest,
                     frames_path=ask.frames_path, temperature=ask.temperature)
        base = {"item_id": ask.item_id, "video_id": ask.video_id, "caption_key": None, "captioner": None,
                "prompt_id": ask.prompt_id, "frame_spec": None}
        rows.append(make_row(r, base, protocol=step.protocol, judge=judge.name, judge_revision=revision,
                             seed=ask.seed, trial=ask.trial))
    return rows_to_table(rows)


def run_step(step: GenerationStep, asks: list[Ask], ctx: ConstructContext, judge) -> list[Generated]:
    """Send the asks through `judge` on the judging path (cached, resumable); one Generated per ask, in order."""
    from capeval.engine.judging.runner import run_judging  # deferred: the judge loop (asyncio, sqlite)

    t0 = time.perf_counter()
    stats = ctx.stats.setdefault(step.name, StepStats())
    stats.asks += len(asks)
    if not asks:
        return []
    requests = render_asks(step, asks, ctx, judge)
    ctx.log(f"step {step.name}: {len(asks)} requests to {judge.name}")
    verdicts, summary = run_judging(requests, judge, cache_dir=ctx.cache_dir, protocol=StepProtocol(step, ctx.mode),
                                    progress=ctx.progress, return_summary=True, max_in_flight=ctx.max_in_flight)
    by_ident = {(r["item_id"], int(r["sub_index"] or 0), int(r["trial"] or 0)): r for r in verdicts.select(
        ["item_id", "sub_index", "trial", "request_key", "verdict", "detail", "raw_output", "error",
         "attempt"]).to_pylist()}
    out = []
    for ask in asks:
        row = by_ident[(ask.item_id, ask.sub_index, ask.trial)]
        ok = row["verdict"] == int(GenerationCode.GENERATED)
        out.append(Generated(ask, row["request_key"], ok, json.loads(row["detail"]) if ok else None,
                             row["raw_output"], None if ok else (row["error"] or row["detail"] or "no reply"),
                             int(row["attempt"] or 0)))
    stats.sent += summary.sent
    stats.cached += summary.cached
    for g in out:
        if not g.ok:
            stats.fail(g.error)
    stats.wall_s += time.perf_counter() - t0
    ctx.log(f"step {step.name}: {summary}")
    return out


RECORD = pa.schema([
    pa.field("pipeline", pa.string()), pa.field("step", pa.string()), pa.field("item_id", pa.string()),
    pa.field("video_id", pa.string()), pa.field("request_key", pa.string()), pa.field("trial", pa.int32()),
    pa.field("output", pa.string()),  # the generated payload (JSON) or the raw reply when it did not parse
    pa.field("kept", pa.bool_()), pa.field("reason", pa.string()),
])


class RecordLog:
    """Per-item record of a run: one row per (step, item[, trial]): what was generated, kept or filtered, and why.
    `kept` is null on evidence rows that decide nothing by themselves (one blind trial of one judge)."""

    def __init__(self, pipeline: str):
        self.pipeline = pipeline
        self.rows: list[dict] = []

    def add(self, step: str, item_id: str, video_id: str, *, kept: bool | None, reason: str, request_key: str | None = None,
            trial: int | None = None, output: Any = None) -> None:
        if output is not None and not isinstance(output, str):
            output = json.dumps(output, ensure_ascii=False)
        self.rows.append({"pipeline": self.pipeline, "step": step, "item_id": item_id, "video_id": video_id,
                          "request_key": request_key, "trial": trial, "output": output,
                          "kept": None if kept is None else bool(kept),
                          "reason": reason})

    def generated(self, step: str, g: Generated, *, kept: bool | None = None, reason: str | None = None,
                  item_id: str | None = None) -> None:
        """A row for one generation: kept when it parsed (unless said otherwise), the parse failure as reason."""
        self.add(step, item_id or g.ask.item_id, g.ask.video_id, kept=g.ok if kept is None else kept,
                 reason=reason or ("generated" if g.ok else f"generation failed: {g.error}"),
                 request_key=g.request_key, trial=g.ask.trial, output=g.payload if g.ok else g.raw)

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=RECORD)
