"""CapQuiz's own command (`CapQuizProtocol.cli_commands`), `capeval capquiz filter`: the blind-solvability filter and
semantic de-duplication over an items file (see filtering.py for the rules), writing the kept items and a per-item
record of why."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from capeval.engine.errors import UsageError
from capeval.engine.inputs.tables import read_items
from capeval.engine.judge_specs import judge_options, judge_specs, option_text
from capeval.engine.protocols.base import CommandTools

from .filtering import BlindProtocol, FilterSettings, blind_counts, decide

USAGE = """examples:
  capeval capquiz filter --items quiz.jsonl --judges local --trials 3 --out kept.jsonl --record why.parquet
  capeval capquiz filter --items quiz.parquet --judges openai@gpt41,openai@gemini \\
      --judge-option gpt41:model=gpt-4.1 --judge-option gemini:model=gemini-2.5-pro \\
      --judge-option gemini:base_url=https://... --out kept.parquet --record why.parquet

A judge is NAME or NAME@LABEL (the same backend twice with different options); --judge-option KEY=VALUE applies to
every judge, LABEL:KEY=VALUE to one. An item is removed as blindly solvable when EVERY judge answers it right,
without the video, in at least --min-correct of --trials shuffled trials.
"""


def register(subparsers, tools: CommandTools) -> None:
    p = subparsers.add_parser("capquiz", help="CapQuiz question-set tools (filter)")
    sub = p.add_subparsers(dest="capquiz_command", metavar="SUBCOMMAND")
    f = sub.add_parser("filter", help="blind-solvability filter + semantic de-duplication of CapQuiz items",
                       epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("--items", required=True, type=Path, help="items (JSONL, CSV or Parquet; options + answer)")
    f.add_argument("--judge", default=None, help="one judge backend (NAME or NAME@LABEL); default local")
    f.add_argument("--judges", default=None, help="comma-separated judges (the paper uses two)")
    f.add_argument("--judge-option", action="append", default=[], metavar="[LABEL:]KEY=VALUE",
                   help="backend option (value parsed as JSON when it parses), repeatable")
    f.add_argument("--trials", type=int, default=3, help="shuffled trials per judge (default 3)")
    f.add_argument("--min-correct", type=int, default=2,
                   help="removed when every judge is right in at least this many trials (default 2)")
    f.add_argument("--dedup-threshold", type=float, default=0.85,
                   help="cosine similarity of questions AND of answers above which two questions of a video are "
                        "duplicates (default 0.85)")
    f.add_argument("--answer-threshold", type=float, default=None, help="answer threshold (default: as questions)")
    f.add_argument("--no-dedup", action="store_true", help="skip de-duplication")
    f.add_argument("--prompts", default=None, help="prompt pack with construct/blind_solvability (default capeval's)")
    f.add_argument("--cache", type=Path, default=Path(".capeval/judge-cache"), help="judgment cache directory")
    f.add_argument("--out", required=True, type=Path, help="kept items (.jsonl or .parquet)")
    f.add_argument("--record", type=Path, default=None, help="per-item record of why (.parquet, .csv or .jsonl)")
    f.add_argument("--no-progress", action="store_true")
    f.add_argument("--debug", action="store_true", help="show tracebacks")
    f.set_defaults(func=lambda args: run_filter(args, tools))
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _write(table: pa.Table, path: Path, what: str) -> None:
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        pq.write_table(table, path)
    elif suffix == ".csv":
        pcsv.write_csv(table, path)
    elif suffix in (".jsonl", ".json"):
        with open(path, "w", encoding="utf-8") as f:
            for row in table.to_pylist():
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        raise UsageError(f"{what} {path}: use a .parquet, .csv or .jsonl file name")


def run_filter(args, tools: CommandTools) -> int:
    if args.trials < 1 or not 1 <= args.min_correct <= args.trials:
        raise UsageError(f"--trials {args.trials} / --min-correct {args.min_correct}: need 1 <= min-correct <= trials")
    for name, value in (("--dedup-threshold", args.dedup_threshold), ("--answer-threshold", args.answer_threshold)):
        if value is not None and not -1.0 <= value <= 1.0:
            raise UsageError(f"{name} {value}: a cosine similarity, between -1 and 1")
    if args.out.suffix.lower() not in (".parquet", ".jsonl", ".json"):
        raise UsageError(f"--out {args.out}: use a .parquet or .jsonl file name")
    items = read_items(args.items, benchmark="capquiz", resolve_media=False)
    specs = judge_specs(args.judges or args.judge or "local")
    options = judge_options(args.judge_option, [label for _, label in specs])
    settings = FilterSettings(trials=args.trials, min_correct=args.min_correct, dedup=not args.no_dedup,
                              question_threshold=args.dedup_threshold,
                              answer_threshold=args.dedup_threshold if args.answer_threshold is None
                              else args.answer_threshold)
    protocol = BlindProtocol(prompts=args.prompts)
    right = {}
    for name, label in specs:
        opts = dict(options[label])
        model, base_url = opts.pop("model", None), opts.pop("base_url", None)
        pairs = [f"{k}={option_text(v)}" for k, v in opts.items()]
        judge = tools.build_judge(name, model, base_url, pairs)  # the user's mistakes exit 2 naming the option
        try:
            requests = protocol.requests(items, judge=judge.name, judge_revision=judge.revision, trials=args.trials)
            verdicts, summary = tools.run_judging(requests, judge, cache_dir=args.cache, protocol=protocol,
                                                  progress=not args.no_progress)
        finally:
            judge.close()
        right[label] = blind_counts(verdicts)
        print(f"[capquiz filter] judge {label}: {summary}", file=sys.stderr)
    record = decide(items, right, settings, embed=tools.sentence_embeddings)
    kept = items.filter(pc.is_in(items.column("item_id"), record.filter(record.column("kept")).column("item_id")))
    _write(kept, args.out, "--out")
    if args.record is not None:
        _write(record, args.record, "--record")
    solvable = sum(record.column("blindly_solvable").to_pylist())
    dupes = sum(d is not None for d in record.column("duplicate_of").to_pylist())
    print(f"[capquiz filter] {items.num_rows} items: {solvable} blindly solvable, {dupes} duplicates removed, "
          f"{kept.num_rows} kept -> {args.out}" + (f" (record: {args.record})" if args.record else ""))
    return 0
