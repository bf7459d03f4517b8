"""`capeval plan FILE`: what a sweep will ask of its judges and captioners, how long that takes and what it costs,
before anything is sent. Nothing here calls the sweep's judges or captioners.

- First steps are exact: each cell's requests are built by its protocol as the run builds them (same items, caption
  files, seeds, params; requests the run would never send, e.g. for a missing caption, left out; identical requests
  of one judge counted once, as the judgment cache sends them once).
- Captions that do not exist yet are stood in for by placeholders as long as the captioner's `max_tokens`: judge
  prompts built on them are an upper bound (said in `assumptions`).
- Later steps of multi-step protocols (answer -> score, extract -> entail) are estimated: a
  sample of first-step units is run through the protocol with the local stand-in judge (adapters/local_judge.py, not
  the sweep's judge), and the later requests it leads to are scaled to every first-step request.
- Re-asks: expected from an earlier run's re-ask share (`run_dir`), else none; the bound is max_reasks per request.
- Tokens: plan_tokens.TokenCounter (the judge's tokenizer when on disk, else characters / 4); completion: a choice
  set's longest choice, otherwise max_tokens (the upper bound) unless an earlier run measured the step.
- Prefix cache: `cached_share` given (0-1), "simulate" (a never-evicting cache over the prompts), measured by an
  earlier run, else 0 (input cost then an upper bound). Wall time: `rate` (requests/s) given, else an earlier run's.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from capeval.engine.sweep.datasets import LoadedDataset, judge_sees_frames, load_dataset
from capeval.engine.sweep.grid import caption_cells, expand, file_captions
from capeval.engine.sweep.plan_tokens import (PrefixCache, TokenCounter, frames_per_request, judge_tokenizer,
                                      placeholder_captions, placeholder_frames, typical_completion)
from capeval.engine.datasets.video_ids import with_dataset_video_ids
from capeval.engine.prompts_library import get_prompt
from capeval.engine.protocols.base import JudgeProtocol, RequestContext
from capeval.engine.registry import lookup
from capeval.engine.sweep.captioning import MAX_TOKENS
from capeval.engine.sweep.cells import cell_items, judge_frames_spec
from capeval.engine.sweep.plan_measured import Measured
from capeval.engine.sweep.prices import resolve_prices

#: the reply bound planned for a request that sends no max_tokens (official mode: the API's default has none)
UNLIMITED_REPLY_TOKENS = 256


@dataclass
class StepPlan:
    judge: str
    protocol: str
    step: str
    kind: str  # "first step (exact)" | "later step (estimated)" | "re-asks (expected)"
    requests: float = 0  # estimated steps hold fractions until shown
    prompt_tokens: float = 0
    cached_prompt_tokens: float = 0
    completion_tokens_typical: float = 0
    completion_tokens_max: float = 0
    images: int = 0
    requests_bound: int | None = None  # re-asks: every request re-asked max_reasks times

    def add(self, prompt: int, cached: float, typical: int, most: int, images: int) -> None:
        self.requests += 1
        self.prompt_tokens += prompt
        self.cached_prompt_tokens += cached
        self.completion_tokens_typical += typical
        self.completion_tokens_max += most
        self.images += images

    def scaled(self, factor: float, kind: str, step: str | None = None) -> "StepPlan":
        return StepPlan(self.judge, self.protocol, step or self.step, kind, self.requests * factor,
                        self.prompt_tokens * factor, self.cached_prompt_tokens * factor,
                        self.completion_tokens_typical * factor, self.completion_tokens_max * factor,
                        self.images * factor)


def plan_sweep(config, *, rate: float | None = None, cached_share: float | str | None = None,
               tokenizer: str | None = None, run_dir: str | Path | None = None, tokens_per_image: int = 0,
               sample: int = 8) -> dict:
    """The plan as a JSON-ready dict (see the module docstring)."""
    notes: list[str] = []
    measured = Measured.read(run_dir)
    counters = {j.display: TokenCounter(tokenizer or judge_tokenizer(j)) for j in config.judges}
    with tempfile.TemporaryDirectory(prefix="capeval-plan-") as tmp:
        datasets = _datasets(config, Path(tmp))
        cells = expand(config, datasets, note=notes.append)
        captions = {cc: _captions(cc, datasets[cc.dataset.name], notes) for cc in caption_cells(config)}
        steps, firsts, asked = _first_steps(cells, datasets, captions, counters, cached_share, measured, notes,
                                            tokens_per_image)
        for (protocol, judge), (cell, table) in firsts.items():
            per_first = _later_steps(cell, table, counters[judge], sample, notes)  # per first-step row asked
            steps += [p.scaled(asked[(protocol, judge)], "later step (estimated)") for p in per_first]
    steps += _reasks(steps, cells, measured, notes)
    _share_cache(steps, cached_share, measured, notes)
    caption_plan = _caption_plan(captions, tokens_per_image)
    return _summarise(config, cells, steps, caption_plan, counters, rate, measured, notes, tokens_per_image)


def _datasets(config, work: Path) -> dict[str, LoadedDataset]:
    """name -> LoadedDataset, loaded as the sweep loads it (items and media paths; media are not read, so no
    digest and no media required)."""
    return {spec.name: load_dataset(spec, out_dir=work, sweep_dir=config.path.parent, require_media=False,
                                    digest=False) for spec in config.datasets}


def _videos(data) -> list[str]:
    return list(data.videos) or list(dict.fromkeys(data.items.column("video_id").to_pylist()))


def _captions(cc, data, notes: list[str]):
    if cc.from_file:
        return with_dataset_video_ids(file_captions(cc), data.items)[0]
    max_tokens = cc.captioner.max_tokens or MAX_TOKENS
    note = (f"captions not made yet stand in at their captioner's max_tokens ({cc.captioner.display}: {max_tokens} "
            f"tokens): judge prompts over them are an upper bound")
    if note not in notes:
        notes.append(note)
    return placeholder_captions(cc, _videos(data), max_tokens)


def _first_steps(cells, datasets, captions, counters, cached_share, measured, notes, tokens_per_image):
    """StepPlans of every cell's first-step requests (identical requests of a judge once), per (protocol, judge)
    one cell's request table (the later steps' sample) and the first-step rows asked (what later steps grow from:
    a request shared by two cells leads to the later steps of each)."""
    steps: dict[tuple, StepPlan] = {}
    seen: dict[str, set] = {}
    prefix = {j: PrefixCache() for j in counters}
    firsts, asked_rows, assumed = {}, {}, set()
    for cell in cells:
        judge, protocol_label = cell.judge.display, cell.protocol.display
        protocol = lookup("protocol", cell.protocol.name)
        data = datasets[cell.caption.dataset.name]
        extra, n_images = {}, 0
        if judge_sees_frames(cell.protocol.name):
            spec = judge_frames_spec(cell)
            extra["frames"] = placeholder_frames(_videos(data), spec)
            n_images = frames_per_request(spec) or 0
        table = protocol.build_requests(cell_items(cell, data), captions[cell.caption], judge=judge,
                                        judge_revision="plan", seeds=list(cell.judge.seeds), **extra,
                                        **cell.protocol.params)
        rows = [(r, RequestContext.decode(r["context"])) for r in table.to_pylist()]
        asked = [(r, ctx) for r, ctx in rows if not ctx.missing]
        asked_rows[(protocol_label, judge)] = asked_rows.get((protocol_label, judge), 0) + len(asked)
        if (protocol_label, judge) not in firsts and _multi_step(protocol):
            firsts[(protocol_label, judge)] = (cell, table)
        counter, done = counters[judge], seen.setdefault(judge, set())
        for r, ctx in asked:
            if r["request_key"] in done:
                continue  # the judgment cache sends an identical request once
            done.add(r["request_key"])
            prompt = counter.prompt(r["system"], r["user"])
            share = prefix[judge].cached_share(r["system"], r["user"]) if cached_share == "simulate" else 0.0
            most = int(r["max_tokens"] or UNLIMITED_REPLY_TOKENS)
            typical, known = typical_completion(r["choices"], most, counter)
            if measured.completion(cell.protocol.name, r["step"]):
                typical = measured.completion(cell.protocol.name, r["step"])
            elif not known:
                assumed.add(f"{protocol_label} {r['step'] or ''}".strip())
            key = (judge, protocol_label, r["step"] or "")
            plan = steps.setdefault(key, StepPlan(judge, protocol_label, r["step"] or "", "first step (exact)"))
            images = n_images if ctx.frames_path else 0
            plan.add(prompt + tokens_per_image * images, share * prompt, typical, most, images)
    if assumed:
        notes.append(f"completion: {', '.join(sorted(assumed))} answers (no fixed choice set) assumed to take their "
                     f"whole max_tokens: no earlier run measured them (pass --out of one)")
    return list(steps.values()), firsts, asked_rows


def _multi_step(protocol) -> bool:
    return type(protocol).next_requests is not JudgeProtocol.next_requests


class _Recorder:
    """The local stand-in judge, keeping every request it is asked (the sample's later steps)."""

    def __init__(self, judge):
        self.inner, self.name, self.revision, self.asked = judge, "plan-stand-in", "plan", []

    def judge(self, requests):
        self.asked.extend(requests)
        return self.inner.judge(requests)

    def close(self) -> None:
        self.inner.close()


def _later_steps(cell, table, counter: TokenCounter, sample: int, notes: list[str]) -> list[StepPlan]:
    """Later-step requests per first-step request, one StepPlan per step, from `sample` first-step units of `cell`
    answered by the local stand-in judge (the caller scales them to the first-step requests of every cell)."""
    import pyarrow as pa

    label = f"{cell.protocol.display} / {cell.judge.display}"
    if sample <= 0:
        notes.append(f"{label}: later steps not estimated (--sample 0)")
        return []
    units = list(dict.fromkeys(zip(table.column("item_id").to_pylist(), table.column("caption_key").to_pylist())))
    chosen = {u for u in units[:sample]}
    mask = [(i, c) in chosen for i, c in zip(table.column("item_id").to_pylist(),
                                             table.column("caption_key").to_pylist())]
    part = table.filter(pa.array(mask))
    first_keys = set(part.column("request_key").to_pylist())
    try:
        from capeval.adapters.local_judge import LocalJudge
        from capeval.engine.judging.scheduler import JudgeScheduler

        judge = _Recorder(LocalJudge())
        with tempfile.TemporaryDirectory(prefix="capeval-plan-sample-") as cache:
            sched = JudgeScheduler(judge, cache, max_in_flight=64)
            sched.add(part, cell.protocol.name, name="plan", protocol_params=dict(cell.protocol.params),
                      keep_intermediate=True)
            sched.run()
    except Exception as exc:  # noqa: BLE001 - an estimate that cannot be made is said, never guessed
        notes.append(f"{label}: later steps not estimated: the stand-in judge failed ({type(exc).__name__}: {exc})")
        return []
    n_first = sum(1 for r in part.to_pylist() if not RequestContext.decode(r["context"]).missing)
    later: dict[str, StepPlan] = {}
    for r in judge.asked:
        if r.key in first_keys or r.meta.get("attempt"):
            continue
        step = r.meta.get("step") or ""
        plan = later.setdefault(step, StepPlan(cell.judge.display, cell.protocol.display, step, "later step"))
        most = r.max_tokens or UNLIMITED_REPLY_TOKENS
        typical, _ = typical_completion(r.choices, most, counter)
        plan.add(counter.prompt(r.system, r.user), 0.0, typical, most, len(r.images or ()))
    notes.append(f"{label}: later steps estimated from {len(chosen)} sampled units ({n_first} first-step requests) "
                 f"answered by the local stand-in judge, not {cell.judge.display}: its answers (how many events, "
                 f"which answers fail) shape how many later requests there are")
    return [p.scaled(1.0 / max(n_first, 1), "later step") for p in later.values()]


def _reasks(steps: list[StepPlan], cells, measured, notes: list[str]) -> list[StepPlan]:
    names = {c.protocol.display: c.protocol for c in cells}
    out = []
    for (judge, protocol), group in _by(steps, lambda s: (s.judge, s.protocol)).items():
        spec = names[protocol]
        policy = lookup("protocol", spec.name).judging_policy(**spec.params)
        total = StepPlan(judge, protocol, "re-ask", "re-asks (expected)")
        for s in group:
            for f in ("requests", "prompt_tokens", "completion_tokens_typical", "completion_tokens_max", "images"):
                setattr(total, f, getattr(total, f) + getattr(s, f))
        share = measured.reask_share(spec.name)
        expected = total.scaled(share or 0.0, "re-asks (expected)", "re-ask")
        expected.requests_bound = int(total.requests * policy.max_reasks)
        out.append(expected)
    if not measured.found:
        notes.append("re-asks: none expected (no earlier run to measure the re-ask share; pass --out of one); "
                     "requests_bound: every request re-asked max_reasks times")
    return out


def _share_cache(steps, cached_share, measured, notes) -> None:
    if cached_share == "simulate":
        notes.append("prefix cache: simulated over the first steps' prompts (never evicting, 64-character blocks); "
                     "later steps and re-asks assume none")
        return
    for s in steps:
        share = cached_share if isinstance(cached_share, float) else measured.cached_share(s.judge)
        s.cached_prompt_tokens = s.prompt_tokens * (share or 0.0)
    if cached_share is None and not measured.found:
        notes.append("prefix cache: none assumed (pass --cached-share X or simulate): input cost is an upper bound")


def _caption_plan(captions, tokens_per_image: int) -> dict[str, StepPlan]:
    out: dict[str, StepPlan] = {}
    counter = TokenCounter()
    for cc, table in captions.items():
        if cc.from_file:
            continue
        plan = out.setdefault(cc.captioner.display, StepPlan("", "", "caption", "captions (max_tokens bound)"))
        prompt = get_prompt(cc.prompt_id)
        n_images = frames_per_request(cc.frame_spec) or 0
        most = cc.captioner.max_tokens or MAX_TOKENS
        for _ in range(table.num_rows):
            plan.add(counter.text(prompt.text) + counter.text(prompt.system or "") + tokens_per_image * n_images,
                     0.0, most, most, n_images)
    return out


def _by(items, key) -> dict:
    out: dict = {}
    for x in items:
        out.setdefault(key(x), []).append(x)
    return out


def _summarise(config, cells, steps, caption_plan, counters, rate, measured, notes, tokens_per_image) -> dict:
    prices = resolve_prices(config)
    judges = {}
    for judge, group in _by(steps, lambda s: s.judge).items():
        p = prices.get(("judge", judge))
        tok = {f: sum(getattr(s, f) for s in group) for f in ("requests", "prompt_tokens", "cached_prompt_tokens",
                                                                 "completion_tokens_typical", "completion_tokens_max",
                                                                 "images")}
        r, source = (rate, "given (--rate)") if rate else measured.rate()
        judges[judge] = {**{k: round(v) for k, v in tok.items()}, "token_count": counters[judge].how,
                         "cost_usd_typical": _usd(p, tok, "completion_tokens_typical"),
                         "cost_usd_max": _usd(p, {**tok, "cached_prompt_tokens": 0}, "completion_tokens_max"),
                         "prices": None if p is None else p.as_dict(), "rate_requests_per_s": r, "rate_source": source,
                         "wall_s": round(tok["requests"] / r, 1) if r else None}
    captioners = {}
    for label, s in caption_plan.items():
        p = prices.get(("captioner", label))
        tok = {"requests": s.requests, "prompt_tokens": s.prompt_tokens, "cached_prompt_tokens": 0,
               "completion_tokens_max": s.completion_tokens_max, "images": s.images}
        captioners[label] = {**{k: round(v) for k, v in tok.items()}, "cost_usd_max": _usd(p, tok,
                                                                                          "completion_tokens_max"),
                             "prices": None if p is None else p.as_dict()}
    if (caption_plan or any(s.images for s in steps)) and not tokens_per_image:
        notes.append("prompt tokens count the text only, not the frames sent: pass --tokens-per-image N to add them")
    parts = [*judges.values(), *captioners.values()]

    def total(key):
        values = [x.get(key, x.get("cost_usd_max")) for x in parts]
        return None if any(v is None for v in values) else round(sum(values), 6)

    walls = [j["wall_s"] for j in judges.values()]
    return {"sweep": str(config.path), "cells": len(cells), "steps": [_step_dict(s) for s in steps],
            "judges": judges, "captioners": captioners,
            "total": {"judge_requests": sum(j["requests"] for j in judges.values()),
                      "caption_requests": sum(c["requests"] for c in captioners.values()),
                      "cost_usd_typical": total("cost_usd_typical"), "cost_usd_max": total("cost_usd_max"),
                      "judge_wall_s": None if not walls or None in walls else round(sum(walls), 1)},
            "assumptions": list(dict.fromkeys(notes))}


def _usd(prices, tok: dict, completion: str) -> float | None:
    if prices is None:
        return None
    return round(prices.cost(round(tok["prompt_tokens"]), round(tok["cached_prompt_tokens"]),
                             round(tok[completion])), 6)


def _step_dict(s: StepPlan) -> dict:
    d = asdict(s)
    for k in ("requests", "prompt_tokens", "cached_prompt_tokens", "completion_tokens_typical",
              "completion_tokens_max", "images"):
        d[k] = round(d[k])
    return d
