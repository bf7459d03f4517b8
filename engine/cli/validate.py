"""`capeval judge validate`: judge exactly the (item, caption) pairs of a recorded reference judge's verdicts with
another judge, through the same path as `capeval judge` (protocol requests, the content-addressed judgment cache,
the protocol's parser), and report how far the two are apart: agreement, Cohen's kappa, Gwet's AC1, the confusion
matrix and each headline metric's bias with a paired bootstrap interval over videos (engine/metrics/validation.py;
docs/validation.md).

`validate` is the one subcommand of `capeval judge` (engine/cli/judge.py registers it); the work is
engine/judge_run/validation.py. The reference is a capeval VERDICTS table (Parquet or CSV: `capeval judge --out`, a
sweep's verdicts) or a folder of a benchmark's released judge verdicts that its protocol reads."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from capeval.engine.cli.options import add_captions_format_options, add_protocol_options
from capeval.engine.judge_run.validation import ValidateOptions, validate_judge
from capeval.engine.metrics.validation import format_report
from capeval.engine.safetext import terminal_text

USAGE = """examples:
  capeval judge validate --protocol NAME --judge local \\
      --reference RELEASE/judgments/MODEL --items RELEASE/annotations/TASK.jsonl \\
      --captions RELEASE/captions/MODEL --tolerance 5 --json --out local-vs-reference.json
  capeval judge validate --protocol NAME --reference gpt-verdicts.parquet --items items.csv \\
      --captions captions.jsonl --judge openai --judge-model Qwen/Qwen2.5-72B-Instruct --base-url http://gpu:8000/v1

A sweep names the JSON file (--out) as `[[judges]] validated = "FILE"`; run.json and the report show it.
"""


def register(subparsers) -> None:
    """`validate` under `capeval judge`'s subcommands."""
    p = subparsers.add_parser("validate", help="a judge's agreement with a reference judge's verdicts, and each "
                              "metric's bias", description=__doc__.split("\n\n")[0], epilog=USAGE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", required=True, help="the protocol both judges judged with")
    p.add_argument("--reference", required=True, type=Path, metavar="VERDICTS",
                   help="the reference's verdicts: a VERDICTS Parquet/CSV, or a release's judgments/<model>/ folder")
    p.add_argument("--items", required=True, type=Path, help="items, as `capeval judge --items` (only the reference's "
                   "items are judged)")
    p.add_argument("--captions", type=Path, help="the captions the reference judged, as `capeval judge --captions`")
    add_captions_format_options(p)
    p.add_argument("--dataset", metavar="KIND", help="read --items as this dataset kind (as capeval judge)")
    p.add_argument("--media-root", type=Path, help="folder the dataset's media paths are relative to")
    p.add_argument("--frames", type=Path, help="FRAMES Parquet for judges that see frames (as capeval judge)")
    p.add_argument("--frame-size", type=int, default=448, help="longer side of frames decoded for the judge")
    p.add_argument("--judge", required=True, help="the judge to validate: local | replay | vllm | openai")
    p.add_argument("--judge-model", help="model path or name (vLLM: a local path or HF id; openai: model name)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. a vLLM server's http://host:8000/v1")
    p.add_argument("--judge-option", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option (value parsed as JSON when it parses), repeatable; replay: replies=FILE")
    add_protocol_options(p)
    p.add_argument("--seed", type=int, default=0, help="judge seed (one trial; default 0)")
    p.add_argument("--captioner", help="the reference's captioner label to compare, when it holds several")
    p.add_argument("--reference-label", help="name of the reference judge in the report (default: the table's "
                   "judge column and captioner)")
    p.add_argument("--limit", type=int, metavar="N", help="judge only the items of the first N videos (file order)")
    p.add_argument("--per-task", type=int, metavar="N", help="judge a seeded random sample of N of the reference's "
                   "judged items per task (all of a task with fewer); cheaper for a paid judge")
    p.add_argument("--sample-seed", type=int, default=0, help="seed of the --per-task sample (default 0)")
    p.add_argument("--tolerance", type=float, metavar="T", help="flag a metric whose bias interval leaves ±T (the "
                   "metric's own units: percentage points for percent metrics)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples for the bias intervals")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the bias intervals (default 0.95)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.add_argument("--out", type=Path, metavar="FILE", help="also write the JSON report here (what a sweep's "
                   "`validated` names)")
    p.add_argument("--verdicts", type=Path, metavar="V.parquet", help="also write the judge's verdicts here")
    p.add_argument("--cache", type=Path, default=Path(".capeval/judge-cache"),
                   help="judgment cache directory, shared with capeval judge (default .capeval/judge-cache)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-reasks", type=int, default=None, help="re-asks for malformed output (default: the "
                   "protocol's policy for --mode)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    # as every command has (engine/cli/__init__.py adds it to the top-level ones)
    p.add_argument("--verbose", action="store_true",
                   help="show the log lines and warnings of the libraries it runs (vLLM, Ray, transformers)")
    p.set_defaults(func=run, command="judge validate")


def run(args) -> int:
    report = validate_judge(ValidateOptions.of(args))
    text = json.dumps(report, indent=2, default=str)
    if args.out is not None:
        tmp = args.out.with_name(f".{args.out.name}.tmp")
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(args.out)
        print(f"[validate] wrote {args.out}", file=sys.stderr)
    print(text if args.json else terminal_text(format_report(report)))
    return 0
