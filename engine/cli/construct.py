"""`capeval construct NAME`: run a benchmark's construction pipeline (engine/construct/) on any judge backend, through
the content-keyed judgment cache, writing items that `capeval judge` and sweeps read plus a per-item record of what
was generated, filtered and why. `capeval construct --list` names the pipelines; docs/construct.md describes them."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from capeval.engine import construct, exitcodes
from capeval.engine.construct.base import ConstructContext, failure_lines
from capeval.engine.construct.outputs import write_outputs
from capeval.engine.errors import UsageError
from capeval.engine.judge_run.backend import build_judge
from capeval.engine.judge_specs import judge_options, option_text
from capeval.engine.sweep.validation import writable_problem

COMMON = """common options (every pipeline):
  --out DIR              output folder: items.jsonl, record.parquet, construct.json (required)
  --mode strict|official strict: capeval's own prompts (default); official: the benchmark's pack (--prompts PATH)
  --prompts PACK         the pack to read prompts from (official mode: the benchmark's own pack TOML)
  --judge SPEC           judge for every step: NAME or NAME@LABEL (local | replay | vllm | openai | ...)
  --step-judge STEP=SPEC[,SPEC]  judge(s) of one step (repeatable); a step that takes several (blind) uses all
  --judge-model, --base-url      model and endpoint of the judges (or per label: --judge-option LABEL:model=...)
  --judge-option [LABEL:]KEY=VALUE  backend option, repeatable (replay: replies=FILE)
  --cache DIR            judgment cache (default OUT/judge-cache): a rerun, or a killed run started again,
                         sends only what is not in it
  --max-in-flight N      requests at a judge at once (default: each judge's own max_in_flight)
  --max-per-item STEP=N  at most N outputs of STEP per unit (e.g. generate=20 questions per video; default: the
                         pipeline's cap, docs/construct.md); the rest is recorded, never asked about downstream
  --max-failure-share X  exit 3 when a step fails more than this share of its asks, or no item is built
                         (default 0.5); the run ends with the failures' reasons, counted
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("construct", help="build benchmark items with a paper's construction pipeline "
                              "(cached, resumable, per-item record)", epilog=COMMON,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true", help="list the construction pipelines and exit")
    sub = p.add_subparsers(dest="pipeline", metavar="NAME")
    for name, pipeline in construct.pipelines().items():
        q = sub.add_parser(name, help=pipeline.summary, epilog=(pipeline.epilog + "\n\n" + COMMON).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        _common_options(q)
        pipeline.add_arguments(q)
        q.set_defaults(func=run)
    p.set_defaults(func=_list_or_help, construct_parser=p)


def _common_options(q) -> None:
    q.add_argument("--out", required=True, type=Path, help="output folder (items.jsonl, record.parquet, "
                   "construct.json)")
    q.add_argument("--mode", choices=("strict", "official"), default="strict",
                   help="strict: capeval's own prompts (default); official: the benchmark's pack (--prompts)")
    q.add_argument("--prompts", default=None, metavar="PACK", help="prompt pack TOML to read the prompts from")
    q.add_argument("--judge", default=None, metavar="SPEC", help="judge of every step: NAME or NAME@LABEL")
    q.add_argument("--step-judge", action="append", default=[], metavar="STEP=SPEC[,SPEC]",
                   help="judge(s) of one step, repeatable")
    q.add_argument("--judge-model", default=None, help="model path or name of the judges")
    q.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint of the judges")
    q.add_argument("--judge-option", action="append", default=[], metavar="[LABEL:]KEY=VALUE",
                   help="backend option (value parsed as JSON when it parses), repeatable")
    q.add_argument("--cache", type=Path, default=None, help="judgment cache directory (default OUT/judge-cache)")
    q.add_argument("--max-in-flight", type=int, default=None, help="requests at a judge at once (default: each "
                   "judge's own max_in_flight option; more than a judge takes is an error)")
    q.add_argument("--max-per-item", action="append", default=[], metavar="STEP=N",
                   help="at most N outputs of STEP per unit (e.g. generate=20 questions per video); the rest is "
                   "recorded and never asked about downstream (default: the pipeline's cap, docs/construct.md)")
    q.add_argument("--max-failure-share", type=float, default=0.5, metavar="X",
                   help="exit 3 when a step fails more than this share of its asks, or no item is built "
                   "(default 0.5)")
    q.add_argument("--no-progress", action="store_true")
    q.add_argument("--debug", action="store_true", help="show tracebacks")


def _list_or_help(args) -> int:
    if args.list:
        for name, pipeline in construct.pipelines().items():
            steps = " -> ".join(pipeline.steps)
            print(f"{name:14s} {pipeline.summary}\n{'':14s} steps: {steps}")
        return 0
    args.construct_parser.print_help()
    return 2


def judge_roles(args, steps: tuple[str, ...], judged: tuple[str, ...]) -> tuple[dict, dict]:
    """(role -> [label], label -> (backend name, options)) from --judge / --step-judge / --judge-option."""
    specs: dict[str, str] = {}  # label -> backend name
    roles: dict[str, list[str]] = {}

    def parse(text: str, where: str) -> list[str]:
        labels = []
        for part in (s.strip() for s in text.split(",")):
            if not part:
                continue
            name, _, label = part.partition("@")
            label = label or name
            if specs.get(label, name) != name:
                raise UsageError(f"{where}: label {label!r} names two backends ({specs[label]!r}, {name!r})")
            specs[label] = name
            labels.append(label)
        if not labels:
            raise UsageError(f"{where}: no judge given")
        return labels

    if args.judge:
        roles["*"] = parse(args.judge, "--judge")
    for pair in args.step_judge:
        step, sep, text = pair.partition("=")
        if not sep:
            raise UsageError(f"--step-judge {pair!r}: expected STEP=NAME[@LABEL][,...]")
        if step not in steps:
            raise UsageError(f"--step-judge {pair!r}: no step {step!r}; the steps are {', '.join(steps)}")
        roles[step] = parse(text, f"--step-judge {pair}")
    missing = [s for s in judged if s not in roles and "*" not in roles]
    if missing:
        raise UsageError(f"no judge for step(s) {', '.join(missing)}: give --judge NAME (every step) or "
                         f"--step-judge STEP=NAME")
    options = judge_options(args.judge_option, list(specs))
    return roles, {label: (name, options[label]) for label, name in specs.items()}


def run(args) -> int:
    started = time.time()
    pipeline = construct.lookup(args.pipeline)
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: is a file; name a folder")
    args.out.mkdir(parents=True, exist_ok=True)
    problem = writable_problem(args.out)
    if problem:
        raise UsageError(f"--out {args.out}: cannot be written: {problem}")
    if not 0.0 <= args.max_failure_share <= 1.0:
        raise UsageError(f"--max-failure-share must be within [0, 1], got {args.max_failure_share}")
    if args.max_in_flight is not None and args.max_in_flight < 1:
        raise UsageError(f"--max-in-flight must be at least 1, got {args.max_in_flight}")
    pipeline.check(args)
    args.step_caps = pipeline.step_caps(args)
    roles, specs = judge_roles(args, pipeline.steps, pipeline.judged_steps(args))
    pack = pipeline.pack(args.mode, args.prompts)

    def factory(label: str):
        name, opts = specs[label]
        opts = dict(opts)
        model = opts.pop("model", None) or args.judge_model
        base_url = opts.pop("base_url", None) or args.base_url
        return build_judge(name, model, base_url, [f"{k}={option_text(v)}" for k, v in opts.items()])

    ctx = ConstructContext(pipeline.name, args.mode, pack, args.cache or args.out / "judge-cache", roles=roles,
                           factory=factory, progress=not args.no_progress, max_in_flight=args.max_in_flight)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
              if k not in ("func", "construct_parser")}
    try:
        result = pipeline.run(args, ctx)
        failures = failure_lines(ctx.stats, result.items.num_rows, args.max_failure_share)
        result.notes.extend(failures)  # kept in construct.json too
        paths = write_outputs(args.out, result, ctx, started=started, config=config)
    finally:
        ctx.close()
    for note in result.notes:
        ctx.log(note)
    kept = sum(k is True for k in result.record.table().column("kept").to_pylist())
    ctx.log(f"{result.items.num_rows} items -> {paths['items']} (record: {paths['record']}, {kept} of "
            f"{result.record.table().num_rows} record rows kept)")
    print(paths["items"])
    if failures:
        ctx.log(f"failed (exit {exitcodes.FAILURES}): {len(failures)} reason(s) above")
        return exitcodes.FAILURES
    return 0
