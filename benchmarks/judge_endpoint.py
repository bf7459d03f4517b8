"""`capeval bench judge --judge openai|vllm ...`: throughput and cost of YOUR judge on a real protocol's requests.

Researchers pick a judge setup (an API model, a vLLM pool of a 70B model) by its throughput and cost on their own
workload. This renders the protocol's first-step requests for your items and captions (exactly what `capeval judge`
sends: same prompts, structured output, seeds) and sends them straight through the judge backend, bypassing the
judgment cache (nothing is answered from it, nothing is written to it), at each concurrency level in turn. Each level
gets its own slice of the requests (a server's prefix cache would otherwise answer a repeated level from the previous
one) and a short unmeasured warm-up. Reported per level: requests/s, prompt and completion tokens/s, latency
p50/p95/p99, the share of prompt tokens the server served from its prefix cache, error share and cost.
`--sweep FILE` projects a sweep's judge requests and cost, each judge priced with its own prices, and the measured
judge's wall time at each level's rate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from capeval.adapters.base import BackendFatalError, ListFeed, StreamingJudge, judge_capabilities
from capeval.adapters.http_chat import Prices
from capeval.engine import schemas
from capeval.engine.errors import AbortedError, UsageError
from capeval.engine.inputs.tables import read_captions, read_items
from capeval.engine.datasets.registry import load
from capeval.engine.judge_run.inputs import release_kind
from capeval.engine.judging.backends import make_judge
from capeval.engine.judging.requests import to_judge_request
from capeval.engine.protocols.base import RequestContext
from capeval.engine.registry import lookup
from capeval.engine.secrets import redact
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.grid import caption_cells
from capeval.engine.sweep.plan import plan_sweep

PLACEHOLDER_CAPTION = ("A placeholder caption standing in for a model's description of this video: a person walks "
                       "across a room, picks up a cup from a wooden table, looks toward the window and sits down, "
                       "while the camera pans slowly to the left and the light dims.")


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    pos = q * (len(s) - 1)  # linear interpolation, as numpy's default percentile
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def read_inputs(items_path: Path, captions_path: Path | None, protocol: str):
    """ITEMS and CAPTIONS tables: a registered benchmark's release layout (the dataset kind its protocol's
    release_dataset_kind names, as `capeval judge` finds it), or a user's JSONL/CSV/Parquet file
    (engine/inputs/tables.py); a captions folder (a release's captions/<model>/) is read by the protocol's
    read_captions. Without captions, each video gets one placeholder caption (shape-only workload)."""
    kind = release_kind(Path(items_path))
    if kind == "items":
        items = read_items(items_path, benchmark=protocol, resolve_media=False)
    else:
        items = load(kind, {"path": str(Path(items_path).resolve())}).items
    if captions_path is None:
        return _placeholder_captions(items)
    if Path(captions_path).is_dir():
        chosen = lookup("protocol", protocol)
        return items, chosen.read_captions(Path(captions_path), items, chosen.caption_file_rules(None)), \
            str(captions_path)
    return items, read_captions(captions_path), str(captions_path)


def build_requests(protocol_name: str, items, captions, judge, params: dict, seeds=(0,)) -> list:
    """First-step JudgeRequests, in the protocol's order (requests sharing a caption adjacent)."""
    protocol = lookup("protocol", protocol_name)
    table = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                    seeds=list(seeds), **params)
    out = []
    for row in table.to_pylist():
        if RequestContext.decode(row["context"]).missing:
            continue  # no caption: the judge is never asked
        out.append(to_judge_request(row))
    return out


def no_requests_reason(protocol_name: str, items_path, items, captions, params: dict) -> str:
    """Why a protocol gave no request to send for these inputs, in words the user can act on."""
    protocol = lookup("protocol", protocol_name)
    if protocol.judge_frames is not None:
        return (f"--protocol {protocol_name}: its judge sees the videos' frames, and `bench judge` sends none (every "
                f"request would go without them); measure a protocol whose judge reads text only on the same "
                f"judge, or time `capeval judge --protocol {protocol_name}`, which decodes them")
    table = protocol.build_requests(items, captions, judge="bench", judge_revision="bench", **params)
    reasons = [RequestContext.decode(r["context"]).missing for r in table.to_pylist()]
    reasons = [r for r in reasons if r]
    why = (f"; all {len(reasons)} request rows lack their input, e.g. {reasons[0]}" if reasons else
           " (no item matches a caption: captions match items by item_id, then video_id)")
    return (f"{items_path}: no judge requests for protocol {protocol_name!r} from {items.num_rows} items and "
            f"{captions.num_rows} captions{why}")


def send(judge, requests: list, concurrency: int) -> list:
    """All `requests` through the backend with at most `concurrency` outstanding: `stream()` when the backend has
    it, else `judge()` in batches of `concurrency`."""
    if isinstance(judge, StreamingJudge):
        return list(judge.stream(ListFeed(requests), concurrency))
    out = []
    for i in range(0, len(requests), concurrency):
        out.extend(judge.judge(requests[i : i + concurrency]))
    return out


def measure_level(judge, requests: list, warmup: list, concurrency: int, prices: Prices | None) -> dict:
    if warmup:
        send(judge, warmup, concurrency)
    t0 = time.perf_counter()
    responses = send(judge, requests, concurrency)
    wall = time.perf_counter() - t0
    ok = [r for r in responses if r.text is not None]
    prompt = sum(r.prompt_tokens for r in responses)
    cached = sum(r.cached_prompt_tokens for r in responses)
    completion = sum(r.completion_tokens for r in responses)
    cost = (prices.cost(prompt, cached, completion) if prices is not None
            else sum(r.cost_usd for r in responses))
    lat = [r.latency_s for r in ok]
    errors = [r.error for r in responses if r.text is None]
    level = {
        "concurrency": concurrency, "requests": len(responses), "wall_s": round(wall, 3),
        "requests_per_s": round(len(responses) / wall, 2) if wall > 0 else None,
        "prompt_tokens_per_s": round(prompt / wall, 1) if wall > 0 else None,
        "completion_tokens_per_s": round(completion / wall, 1) if wall > 0 else None,
        "latency_p50_s": _round(_pct(lat, 0.50)), "latency_p95_s": _round(_pct(lat, 0.95)),
        "latency_p99_s": _round(_pct(lat, 0.99)),
        "prompt_tokens": prompt, "cached_prompt_tokens": cached, "completion_tokens": completion,
        "cached_prompt_share": round(cached / prompt, 4) if prompt else 0.0,
        "errors": len(errors), "error_share": round(len(errors) / len(responses), 4) if responses else 0.0,
        "cost_usd": round(cost, 6),
        "cost_per_1k_requests_usd": round(1000 * cost / len(responses), 6) if responses else 0.0,
    }
    if errors:
        level["first_error"] = errors[0][:300]
    return level


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def project_sweep(sweep_path: Path, levels: list[dict], *, backend: str | None = None, model: str | None = None,
                  prices: Prices | None = None) -> dict:
    """The sweep's judge work, each judge on its own terms: its first-step requests and prompt tokens as
    `capeval plan` builds them (engine/sweep/plan.py: every cell's requests, identical ones once per judge), priced
    with that judge's own prices (the sweep's `prices` tables or prices file, its price params). The measured judge
    (the sweep judge of backend `backend` and model `model`) also gets, per level, its wall time at the level's
    requests/s, the level's prefix-cache share, and the --price-* flags when the sweep gives it no prices; a judge
    that was not measured has no wall time here, and one without prices no cost (null, never another judge's)."""
    config = load_sweep(sweep_path, check_paths=False)
    plan = plan_sweep(config, sample=0)  # first steps only: later steps and re-asks are not projected here
    own = {j.display: _sweep_prices(plan["judges"].get(j.display, {}).get("prices")) for j in config.judges}
    measured = {j.display for j in config.judges if j.name == backend and j.params.get("model") == model}
    by_protocol: dict[str, int] = {}
    for step in plan["steps"]:
        if step["kind"].startswith("first"):
            by_protocol[step["protocol"]] = by_protocol.get(step["protocol"], 0) + step["requests"]
    # each judge's own prices; the --price-* flags only for the measured judge
    price_of = {label: own.get(label) or (prices if label in measured else None) for label in plan["judges"]}
    by_judge = {}
    for label, j in plan["judges"].items():
        p = price_of[label]
        by_judge[label] = {"requests": j["requests"], "prompt_tokens": j["prompt_tokens"],
                           "completion_tokens_typical": j["completion_tokens_typical"], "measured": label in measured,
                           "prices": None if p is None else {"input": p.prompt_per_m, "cached_input": p.cached_per_m,
                                                             "output": p.completion_per_m},
                           "prices_from": ("sweep" if own.get(label) else "--price-* flags" if p else None)}
    projections = []
    for level in levels:
        rate, share = level.get("requests_per_s"), level.get("cached_prompt_share", 0.0)
        per = {}
        for label, j in by_judge.items():
            p = price_of[label]
            cached = round(j["prompt_tokens"] * share) if label in measured else 0
            per[label] = {"cost_usd": None if p is None else round(
                              p.cost(j["prompt_tokens"], cached, j["completion_tokens_typical"]), 4),
                          "wall_s": round(j["requests"] / rate, 3) if rate and label in measured else None}
        walls = [v["wall_s"] for v in per.values() if v["wall_s"] is not None]
        costs = [v["cost_usd"] for v in per.values()]
        projections.append({"concurrency": level["concurrency"],
                            "wall_s": round(sum(walls), 3) if walls else None,
                            "wall_h": round(sum(walls) / 3600, 4) if walls else None,
                            "cost_usd": None if None in costs else round(sum(costs), 4), "by_judge": per})
    return {"sweep": str(sweep_path), "caption_cells": _caption_cells(config), "judges": len(config.judges),
            "first_step_requests": sum(by_protocol.values()), "by_protocol": by_protocol, "by_judge": by_judge,
            "projection": projections,
            "note": "first-step requests only (capeval plan FILE estimates later steps and re-asks too); each judge "
                    "priced with its own prices (null without any); wall time for the measured judge only, at its "
                    "measured rate; prompt tokens counted as characters / 4 unless the judge's tokenizer is on disk"}


def _sweep_prices(p: dict | None) -> Prices | None:
    return None if p is None else Prices(p["input"], p["cached_input"], p["output"])


def _caption_cells(config) -> int:
    return len(caption_cells(config))


def _placeholder_captions(items):
    import pyarrow as pa

    videos = sorted(set(items.column("video_id").to_pylist()))
    captions = schemas.conform(pa.table({
        "caption_key": [f"placeholder/{v}" for v in videos], "captioner": ["placeholder"] * len(videos),
        "prompt_id": ["placeholder"] * len(videos), "frame_spec": ["none"] * len(videos), "video_id": videos,
        "text": [PLACEHOLDER_CAPTION] * len(videos)}), schemas.CAPTIONS)
    return items, captions, "placeholder"


def _options(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="capeval bench judge", description=__doc__.split("\n\n")[0])
    p.add_argument("--judge", required=True, choices=("openai", "vllm"), help="backend to measure")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint (openai), e.g. http://gpu-node:8000/v1")
    p.add_argument("--judge-model", required=True, help="model name (openai) or local path / HF id (vllm)")
    p.add_argument("--protocol", required=True, help="a registered protocol (capeval list)")
    p.add_argument("--items", required=True, type=Path, help="items: a release's annotations folder (its protocol "
                   "reads it), or a JSONL/CSV/Parquet items file (docs/inputs.md)")
    p.add_argument("--captions", type=Path, help="captions file or a release's captions/<model> folder (default: "
                   "one placeholder caption per video)")
    p.add_argument("--seeds", default="0", help="comma-separated judge seeds, one trial per seed (default 0); "
                   "the trials of an item are adjacent, as in `capeval judge`")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="protocol param (mode, ...)")
    p.add_argument("--judge-option", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option, e.g. structured=vllm, timeout_s=60 (value parsed as JSON when it parses)")
    p.add_argument("--requests", type=int, default=256, help="measured requests per concurrency level")
    p.add_argument("--warmup", type=int, default=8, help="unmeasured requests before each level")
    p.add_argument("--concurrency", default="16,64,256", help="comma-separated in-flight levels")
    p.add_argument("--price-prompt", type=float, default=None, help="USD per 1M uncached prompt tokens")
    p.add_argument("--price-cached", type=float, default=None, help="USD per 1M cached prompt tokens")
    p.add_argument("--price-completion", type=float, default=None, help="USD per 1M completion tokens")
    p.add_argument("--sweep", type=Path, help="project this sweep's judge requests, wall time and cost")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    except ValueError:
        raise ValueError(f"--concurrency {args.concurrency!r}: expected comma-separated integers") from None
    if not levels or min(levels) < 1 or args.requests < 1 or args.warmup < 0:
        raise ValueError("--concurrency levels and --requests must be >= 1, --warmup >= 0")
    if args.judge == "openai" and not args.base_url and not any(
            o.startswith("base_url=") for o in args.judge_option):
        print("[bench judge] no --base-url: measuring api.openai.com", file=sys.stderr)
    with stdout_to_stderr() if args.json else contextlib.nullcontext():
        result = run(args, levels)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        _print_table(result)
    return 0


@contextlib.contextmanager
def stdout_to_stderr():
    """vLLM (and others) log to stdout; with --json, stdout must carry the JSON alone: fd 1 goes to stderr until
    the block ends."""
    real_stdout = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
        os.close(real_stdout)


def run(args, levels: list[int]) -> dict:
    options = _options(args.judge_option)
    prices = None
    if any(v is not None for v in (args.price_prompt, args.price_cached, args.price_completion)):
        prices = Prices(args.price_prompt or 0.0, args.price_cached, args.price_completion or 0.0)
    if args.judge == "openai":
        options.setdefault("max_in_flight", max(levels))
        options.setdefault("structured", "vllm" if args.base_url else "openai")
        # each level measures the server with exactly its requests: no hedge copies in the drain (adapters/http_chat.py)
        options.setdefault("hedge", 0)
    params = _options(args.param)
    judge = make_judge(args.judge, model=args.judge_model, base_url=args.base_url, **options)
    try:
        takes = judge_capabilities(judge).max_in_flight
        if takes is not None and max(levels) > takes:
            raise UsageError(f"--concurrency {max(levels)}: judge {judge.name} takes at most {takes} requests in "
                             f"flight (its max_in_flight option); give --judge-option max_in_flight={max(levels)}")
        items, captions, caption_source = read_inputs(args.items, args.captions, args.protocol)
        try:
            seeds = [int(x) for x in str(args.seeds).split(",") if x.strip()]
            requests = build_requests(args.protocol, items, captions, judge, params, seeds=seeds)
        except (ValueError, KeyError) as exc:
            raise UsageError(f"{args.items}: cannot build {args.protocol} requests: {exc}") from None
        if not requests:
            raise UsageError(no_requests_reason(args.protocol, args.items, items, captions, params))
        per_level = args.warmup + args.requests
        disjoint = len(requests) >= per_level * len(levels)
        measured = []
        for i, c in enumerate(levels):
            start = (i * per_level) % max(1, len(requests) - per_level + 1) if not disjoint else i * per_level
            chunk = requests[start : start + per_level]
            if len(chunk) < per_level:
                chunk = (chunk * (per_level // max(1, len(chunk)) + 1))[:per_level]
            print(f"[bench judge] concurrency {c}: {len(chunk) - args.warmup} requests", file=sys.stderr)
            try:
                measured.append(measure_level(judge, chunk[args.warmup :], chunk[: args.warmup], c, prices))
            except BackendFatalError as exc:
                raise AbortedError(f"judge refused the run: {exc}") from None
    finally:
        judge.close()
    result = {
        "judge": {"backend": args.judge, "model": args.judge_model, "base_url": args.base_url,
                  "options": {k: v for k, v in options.items() if "key" not in k}},
        "workload": {"protocol": args.protocol, "items": str(args.items), "captions": caption_source,
                     "available_requests": len(requests), "requests_per_level": args.requests,
                     "warmup_per_level": args.warmup, "disjoint_slices": disjoint, "params": params,
                     "seeds": args.seeds,
                     "cache": "bypassed (requests sent straight to the backend)"},
        "levels": measured,
        "cost_note": "from --price-* flags" if prices else "from the backend's price options (0 when none given)",
    }
    if args.sweep:
        result["sweep"] = project_sweep(args.sweep, measured, backend=args.judge, model=args.judge_model,
                                        prices=prices)
    return redact(result)  # a key inside base_url (userinfo, ?api-key=) is never printed or saved


def _print_table(result: dict) -> None:
    w = result["workload"]
    print(f"judge {result['judge']['model']} ({result['judge']['backend']}) on {w['protocol']}: "
          f"{w['requests_per_level']} requests per level, captions: {w['captions']}")
    head = ("in flight", "req/s", "prompt tok/s", "compl tok/s", "p50 s", "p95 s", "p99 s", "cached", "errors",
            "cost $")
    print(" | ".join(head))
    for lv in result["levels"]:
        print(" | ".join(str(x) for x in (lv["concurrency"], lv["requests_per_s"], lv["prompt_tokens_per_s"],
                                            lv["completion_tokens_per_s"], lv["latency_p50_s"], lv["latency_p95_s"],
                                            lv["latency_p99_s"], f"{lv['cached_prompt_share']:.1%}",
                                            f"{lv['error_share']:.1%}", lv["cost_usd"])))
    if "sweep" in result:
        s = result["sweep"]
        print(f"sweep {s['sweep']}: {s['first_step_requests']} first-step judge requests {s['by_protocol']}")
        for pj in s["projection"]:
            each = ", ".join(f"{k} ${v['cost_usd']}" + (f" {v['wall_s']} s" if v["wall_s"] is not None else "")
                             for k, v in pj["by_judge"].items())
            print(f"  at {pj['concurrency']} in flight (measured judge): {pj['wall_s']} s; cost ${pj['cost_usd']} "
                  f"({each})")
