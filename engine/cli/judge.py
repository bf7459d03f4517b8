"""`capeval judge`: render one protocol's judge requests for items x captions, judge them through the content-
addressed cache (a rerun or a resumed run sends only what is missing) and write a VERDICTS Parquet file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

USAGE = """examples:
  capeval judge --protocol capquiz --items items.parquet --captions captions.parquet \\
      --judge local --cache .capeval/judge-cache --out verdicts.parquet
  capeval judge --protocol vidcapbench ... --judge openai --judge-model gpt-4.1 --seeds 0,1,2
  capeval judge --protocol lvcap ... --judge openai --judge-model Qwen/Qwen2.5-72B-Instruct \\
      --base-url http://gpu-node:8000/v1        (a vLLM server; see docs/judges.md)
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("judge", help="judge captions with one protocol (cached, resumable)",
                              epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--protocol", required=True, help="capquiz | lvcap | capability | vidcapbench | vcinspector")
    p.add_argument("--items", required=True, type=Path, help="ITEMS Parquet (engine.schemas.ITEMS)")
    p.add_argument("--captions", required=True, type=Path, help="CAPTIONS Parquet (engine.schemas.CAPTIONS)")
    p.add_argument("--frames", type=Path, help="FRAMES Parquet (VC-Inspector: frames shown to the judge)")
    p.add_argument("--judge", required=True, help="judge backend: local | vllm | openai")
    p.add_argument("--judge-model", help="model path or name (vLLM: a local path or HF id; openai: model name)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. a vLLM server's http://host:8000/v1")
    p.add_argument("--judge-option", action="append", default=[], metavar="KEY=VALUE",
                   help="extra backend option (value parsed as JSON when it parses), repeatable")
    p.add_argument("--seeds", default="0", help="comma-separated judge seeds; one trial per seed (default 0)")
    p.add_argument("--cache", required=True, type=Path, help="judgment cache directory (shared by runs)")
    p.add_argument("--out", required=True, type=Path, help="VERDICTS Parquet to write")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-reasks", type=int, default=2, help="re-asks for malformed output (default 2)")
    p.add_argument("--keep-intermediate", action="store_true", help="also keep answer/extract step rows")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def _read(path: Path, schema, what: str):
    import pyarrow.parquet as pq

    from engine.schemas import conform

    if not path.is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    try:
        return conform(pq.read_table(path), schema)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not a valid {what} table: {exc}") from exc


def _options(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--judge-option {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def run(args) -> int:
    from engine.judging.backends import make_judge
    from engine.judging.runner import run_judging
    from engine.registry import lookup
    from engine.schemas import CAPTIONS, FRAMES, ITEMS
    from engine.store.segments import write_parquet_atomic

    try:
        seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seeds {args.seeds!r}: expected comma-separated integers") from None
    protocol = lookup("protocol", args.protocol)
    items = _read(args.items, ITEMS, "items")
    captions = _read(args.captions, CAPTIONS, "captions")
    frames = _read(args.frames, FRAMES, "frames") if args.frames else None
    judge = make_judge(args.judge, model=args.judge_model, base_url=args.base_url, **_options(args.judge_option))
    try:
        requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision,
                                           seeds=seeds, frames=frames)
        n_uncaptioned = getattr(protocol, "uncaptioned_items", 0)
        print(f"[judge] {protocol.name}: {requests.num_rows} first-step requests from {items.num_rows} items x "
              f"{captions.num_rows} captions" + (f" ({n_uncaptioned} items have no caption)" if n_uncaptioned else ""),
              file=sys.stderr)
        verdicts, summary = run_judging(requests, judge, cache_dir=args.cache, protocol=protocol,
                                        batch_size=args.batch_size, max_reasks=args.max_reasks,
                                        progress=not args.no_progress, keep_intermediate=args.keep_intermediate,
                                        return_summary=True)
    finally:
        judge.close()
    write_parquet_atomic(verdicts, args.out)
    print(f"[judge] {summary}")
    print(f"[judge] wrote {verdicts.num_rows} verdict rows to {args.out}")
    return 0
