"""`capeval plan FILE`: before running a sweep, its judge requests per step, tokens, wall time and cost (and its
captioning's), without sending anything to a judge or captioner (engine/sweep/plan.py says what is exact and what
is estimated)."""

from __future__ import annotations

import json
from pathlib import Path

from capeval.engine.cli.sweep import with_limit
from capeval.engine.ray_local import quiet_libraries
from capeval.engine.safetext import terminal_text
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.plan import plan_sweep


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="a sweep's requests, tokens, wall time and cost, before running it")
    p.add_argument("file", help="sweep file (.toml or .yaml)")
    p.add_argument("--out", help="an earlier run's folder to measure rates, prefix-cache share, re-asks and "
                                 "completion lengths from (default: runs/<sweep name> when it exists); never written")
    p.add_argument("--rate", type=_positive_float, metavar="REQ_PER_S",
                   help="judge requests per second, for the wall time (default: measured by an earlier run)")
    p.add_argument("--cached-share", type=_share, metavar="X|simulate",
                   help="share of prompt tokens the judge server serves from its prefix cache (0-1), or 'simulate' "
                        "(a never-evicting cache over the prompts); default: measured by an earlier run, else 0")
    p.add_argument("--tokenizer", metavar="PATH", help="a local tokenizer folder to count prompt tokens with "
                   "(default: the judge's own when its model is a local folder, else characters / 4)")
    p.add_argument("--tokens-per-image", type=int, default=0, metavar="N",
                   help="prompt tokens each frame costs the captioner (and a frame-showing judge); default 0")
    p.add_argument("--sample", type=int, default=8, metavar="N",
                   help="first-step units run through the local stand-in judge to estimate later steps of multi-step "
                        "protocols (default 8; 0: do not estimate them)")
    p.add_argument("--limit", type=int, metavar="N", help="as `capeval sweep --limit N`")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=main)


def _positive_float(text: str) -> float:
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value <= 0:  # nan passes `value <= 0` and would plan "wall nan s"
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text!r}")
    return value


def _share(text: str) -> float | str:
    import argparse

    if text == "simulate":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1 or 'simulate', got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def main(args) -> int:
    quiet_libraries(False)  # the stand-in judge's model loader stays quiet
    config = with_limit(load_sweep(args.file), args.limit)  # every problem of the file at once (exit 2)
    run_dir = Path(args.out) if args.out else Path("runs") / config.name
    plan = plan_sweep(config, rate=args.rate, cached_share=args.cached_share, tokenizer=args.tokenizer,
                      run_dir=run_dir, tokens_per_image=args.tokens_per_image, sample=args.sample)
    if args.json:
        print(json.dumps(plan, indent=1))
    else:
        print(terminal_text(format_plan(plan)))
    return 0


def _usd(v) -> str:
    return "unknown (no prices)" if v is None else f"${v:,.4f}"


def format_plan(plan: dict) -> str:
    lines = [f"{plan['sweep']}: {plan['cells']} cells"]
    head = ("judge", "protocol", "step", "kind", "requests", "prompt tok", "cached tok", "compl typical", "compl max")
    rows = [head] + [(s["judge"], s["protocol"], s["step"], s["kind"],
                      f"{s['requests']}" + (f" (bound {s['requests_bound']})" if s.get("requests_bound") else ""),
                      s["prompt_tokens"], s["cached_prompt_tokens"], s["completion_tokens_typical"],
                      s["completion_tokens_max"]) for s in plan["steps"]]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(head))]
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)) for r in rows]
    for label, j in plan["judges"].items():
        wall = "unknown" if j["wall_s"] is None else f"{j['wall_s']:.0f} s at {j['rate_requests_per_s']:g} req/s"
        lines.append(f"judge {label}: {j['requests']} requests, {j['prompt_tokens']} prompt tokens "
                     f"({j['token_count']}), cost {_usd(j['cost_usd_typical'])} typical, "
                     f"{_usd(j['cost_usd_max'])} at most; wall {wall} ({j['rate_source']})")
    for label, c in plan["captioners"].items():
        lines.append(f"captioner {label}: {c['requests']} requests, {c['prompt_tokens']} prompt tokens, "
                     f"{c['images']} frames, up to {c['completion_tokens_max']} caption tokens; cost "
                     f"{_usd(c['cost_usd_max'])} at most")
    t = plan["total"]
    lines.append(f"total: {t['judge_requests']} judge requests, {t['caption_requests']} caption requests; cost "
                 f"{_usd(t['cost_usd_typical'])} typical, {_usd(t['cost_usd_max'])} at most; judge wall time "
                 + ("unknown" if t["judge_wall_s"] is None else f"{t['judge_wall_s']:.0f} s"))
    lines += [f"  note: {n}" for n in plan["assumptions"]]
    return "\n".join(lines)
