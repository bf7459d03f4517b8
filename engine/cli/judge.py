"""`capeval judge`: the command line of one judging run (engine/judge_run/run.py: render one protocol's judge
requests for items x captions, judge them through the content-addressed cache, write a VERDICTS Parquet file and
print the protocol's metrics), and of `capeval judge validate` (engine/cli/validate.py), its one subcommand.

Items and captions are the files people have (JSONL, CSV, Parquet; docs/inputs.md) or a benchmark's release
layout (`--dataset KIND`, detected automatically when a protocol recognises its release's files or folders).
Everything is checked before the first request: tables, protocol params, and that `--out` can be written."""

from __future__ import annotations

import argparse
from pathlib import Path

from capeval.engine.cli import validate
from capeval.engine.cli.breakdowns import add_by_option
from capeval.engine.cli.options import add_captions_format_options, add_protocol_options
from capeval.engine.errors import UsageError
from capeval.engine.judge_run.run import JudgeOptions, judge_items

USAGE = """examples:
  capeval judge --protocol NAME --items items.csv --captions captions.jsonl --judge local --out verdicts.parquet
  capeval judge --protocol NAME --items RELEASE/annotations/TASK.jsonl \\
      --captions RELEASE/captions/MODEL/TASK.jsonl --judge local --out v.parquet   (a release its protocol reads)
  capeval judge --protocol NAME ... --judge openai --judge-model gpt-4.1 --seeds 0,1,2
  capeval judge --protocol NAME --mode official --prompts ../shared/protocols/NAME.toml ...
  capeval judge --protocol NAME --items items.jsonl --captions logs/MODEL/DATE_samples_TASK.jsonl \
      --captions-format lmms-eval --captions-id-field doc.video_id --judge local --out v.parquet
  capeval judge --protocol NAME ... --judge openai --judge-model Qwen/Qwen2.5-72B-Instruct \\
      --base-url http://gpu-node:8000/v1        (a vLLM server; see docs/judges.md)

NAME is a registered protocol (capeval list protocols).
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("judge", help="judge captions with one protocol (cached, resumable), print metrics",
                              epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    # `capeval judge validate ...` is the one subcommand; a judging run itself takes no positional argument
    validate.register(p.add_subparsers(title="subcommand", metavar="validate"))
    p.add_argument("--protocol", help="a registered protocol (capeval list protocols) (required)")
    p.add_argument("--items", type=Path,
                   help="items: JSONL/CSV/Parquet (docs/inputs.md) or a release file/folder (see --dataset) "
                        "(required)")
    p.add_argument("--captions", type=Path,
                   help="captions: JSONL/CSV/Parquet with video_id|item_id and caption, or a release's "
                        "captions/<model>/ folder, or another tool's output (--captions-format) (optional for "
                        "datasets that bring their captions)")
    add_captions_format_options(p)
    p.add_argument("--dataset", metavar="KIND",
                   help="read --items as this dataset kind (capeval list kinds); default: a benchmark release layout "
                        "that a protocol recognises, else an items table")
    p.add_argument("--media-root", type=Path, help="folder the dataset's media paths are relative to")
    p.add_argument("--frames", type=Path, help="FRAMES Parquet (the frames shown to a judge that sees frames); "
                   "default: decode the items' media with the protocol's judge_frames spec (cached under --cache)")
    p.add_argument("--frame-size", type=int, default=448, help="longer side of frames decoded for the judge")
    p.add_argument("--judge", help="judge backend: local | replay | vllm | openai (required)")
    p.add_argument("--judge-model", help="model path or name (vLLM: a local path or HF id; openai: model name)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. a vLLM server's http://host:8000/v1")
    p.add_argument("--judge-option", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option (value parsed as JSON when it parses), repeatable; replay: replies=FILE")
    add_protocol_options(p)
    p.add_argument("--seeds", default="0", help="comma-separated judge seeds; one trial per seed (default 0)")
    p.add_argument("--limit", type=int, metavar="N", help="judge only the items of the first N videos (file order)")
    p.add_argument("--cache", type=Path, default=Path(".capeval/judge-cache"),
                   help="judgment cache directory, shared by runs (default .capeval/judge-cache)")
    p.add_argument("--out", type=Path, help="VERDICTS Parquet to write (checked before judging) (required)")
    p.add_argument("--metrics", type=Path, help="also write the metrics as CSV here")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples for the metrics' CIs (0: none)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-reasks", type=int, default=None, help="re-asks for malformed output (default: the "
                   "protocol's policy for --mode)")
    p.add_argument("--keep-intermediate", action="store_true", help="also keep answer/extract step rows")
    p.add_argument("--max-failure-share", type=float, default=0.0, metavar="X",
                   help="exit 0 only when at most this share of verdict rows has no verdict (default 0); else the run "
                        "completes with exit code 3 and a rerun asks only the failed requests again")
    add_by_option(p)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


#: the options a judging run needs (not argparse-required: `capeval judge validate` has its own)
REQUIRED = (("--protocol", "protocol"), ("--items", "items"), ("--judge", "judge"), ("--out", "out"))


def run(args) -> int:
    missing = [flag for flag, name in REQUIRED if getattr(args, name) is None]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)}")
    return judge_items(JudgeOptions.of(args), record_config={k: v for k, v in vars(args).items() if k != "func"})
