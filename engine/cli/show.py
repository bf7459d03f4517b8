"""`capeval show DIR`: what the judge was sent and answered, per request (engine/store/transcripts.py).

For a sweep's run folder (its `transcripts/`, labelled as the results table names the systems) or a verdict table
written by `capeval judge --out V.parquet` (`V.transcripts.parquet` beside it). Per request: the cell, the item,
the messages (system, user; images as frames path, digest and count), the sampling, every attempt (where its
answer came from, the raw reply, what parsing made of it or what went wrong, tokens, latency, cost) and the final
verdict. Untrusted text is escaped for the terminal; `--json` prints the same content as JSON.

`capeval show DIR --frames`: instead, per caption, what its model was given (the frames-seen ledger,
engine/frames/ledger.py): decoder and version, frame indices and timestamps, frame size, pixel digest, and what the
backend handed its processor (metadata, kwargs, visual tokens) where it reports it."""

from __future__ import annotations

import sys
from pathlib import Path

from capeval.engine.errors import UsageError
from capeval.engine.report.compare import matches_selector
from capeval.engine.report.frames_ledger import caption_rows, format_ledger, ledger_records, select_rows
from capeval.engine.report.provenance import format_provenance, provenance
from capeval.engine.report.rundir import CELL_COLUMNS
from capeval.engine.report.transcripts import format_request, load_transcripts, request_records, select
from capeval.engine.safetext import json_for_terminal
from capeval.engine.store.transcripts import beside

USAGE = """examples:
  capeval show runs/demo --item shapes-001/action
  capeval show runs/demo --system "captioner=local,prompt_id=brief" --protocol <name> --limit 5
  capeval show verdicts.parquet --json --limit 0        (capeval judge --out verdicts.parquet)
  capeval show runs/demo --provenance --system prompt_id=brief   (what a published number depends on)
  capeval show runs/demo --frames --system frame_spec=uniform:8 --item shapes-000   (the frames each caption saw)
"""


def register(sub) -> None:
    import argparse

    p = sub.add_parser("show", help="show the judge's transcripts: prompts sent, replies, parsing, verdicts",
                       epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path, help="a sweep's output folder, or a verdict table written by capeval judge")
    p.add_argument("--item", metavar="ID", help="only this item id")
    p.add_argument("--system", metavar="SELECTOR",
                   help="only these systems: 'captioner=X,prompt_id=Y' (dataset, captioner, prompt_id, frame_spec, "
                        "protocol, judge) or a bare value of any of them")
    p.add_argument("--protocol", metavar="P", help="only this protocol (its label in the sweep, or its name)")
    p.add_argument("--failed", action="store_true", help="only requests that ended without a verdict")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="show at most N requests (0: all; default 20)")
    p.add_argument("--provenance", action="store_true",
                   help="instead of requests: per system of the results, everything its numbers depend on (dataset "
                        "as read: path, file and content digests, items and videos; captioner and its revision, "
                        "caption prompt digest, frame options, protocol version, mode and pack digests, judge and its "
                        "revision and validation, capeval's git revision)")
    p.add_argument("--frames", action="store_true",
                   help="instead of requests: per caption, the frames its model was given (decoder and version, frame "
                        "indices and timestamps, frame size, pixel digest, processor metadata and visual tokens where "
                        "the backend reports them); --item is then a video id")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def run(args) -> int:
    import polars as pl

    if args.limit < 0:
        raise UsageError(f"--limit must be >= 0, got {args.limit}")
    if not args.run_dir.exists():
        raise FileNotFoundError(f"{args.run_dir}: no such run folder or verdict table")
    if args.provenance:
        return _provenance(args)
    if args.frames:
        return _frames(args)
    t = load_transcripts(args.run_dir)
    if t is None:
        where = f"{args.run_dir}/transcripts/" if args.run_dir.is_dir() else f"{beside(args.run_dir)}"
        print(f"no judge transcripts in {where} (runs before transcripts existed keep none; rerunning the judge "
              "from its cache writes them)", file=sys.stderr)
        return 1
    try:
        rows = select(t, item=args.item, system=args.system, protocol=args.protocol)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.failed:
        rows = rows.filter(pl.col("verdict") < 0)
    total = rows.height
    if not total and (args.item or args.system or args.protocol):
        raise UsageError("no request matches " + " ".join(
            f"--{k} {v!r}" for k, v in (("item", args.item), ("system", args.system), ("protocol", args.protocol))
            if v) + "; " + _choices(t))
    shown = rows if args.limit == 0 else rows.head(args.limit)
    records = request_records(shown)
    if args.json:
        print(json_for_terminal({"requests": records, "matched": total, "shown": len(records)}, default=str, indent=1))
    else:
        for i, rec in enumerate(records, 1):
            print(format_request(rec, i, total))
            print()
        more = f"; {total - len(records)} more not shown (--limit 0 shows all)" if total > len(records) else ""
        print(f"{total} request(s) matched{more}")
    return 0


def _provenance(args) -> int:
    records = provenance(args.run_dir)
    if args.system:
        records = [r for r in records if matches_selector(r["system"], args.system)]
    print(json_for_terminal(records, default=str, indent=1) if args.json else format_provenance(records))
    return 0


def _frames(args) -> int:
    """--frames: the frames-seen ledger of the selected captions (engine/report/frames_ledger.py)."""
    if args.protocol or args.failed:
        raise UsageError("--frames shows captions: --protocol and --failed select judge requests and do not apply")
    rows = caption_rows(args.run_dir)
    chosen = select_rows(rows, args.system, args.item)
    if not chosen.height and (args.system or args.item):
        systems = sorted({",".join(f"{c}={r[c]}" for c in ("captioner", "prompt_id", "frame_spec"))
                          for r in rows.iter_rows(named=True)})
        raise UsageError(f"no caption matches --system {args.system!r} --item {args.item!r}; the run holds "
                         f"{', '.join(systems[:8]) or 'no captions'}" + (" ..." if len(systems) > 8 else ""))
    records = ledger_records(chosen)
    total = len(records)
    shown = records if args.limit == 0 else records[:args.limit]
    if args.json:
        print(json_for_terminal({"captions": shown, "matched": total, "shown": len(shown)}, default=str, indent=1))
    else:
        for rec in shown:
            print(format_ledger(rec))
            print()
        more = f"; {total - len(shown)} more not shown (--limit 0 shows all)" if total > len(shown) else ""
        print(f"{total} caption(s) matched{more}")
    return 0


def _choices(t, shown: int = 8) -> str:
    """What the run holds, for a selector that matched nothing."""
    parts = []
    for c in ("protocol", *[c for c in CELL_COLUMNS if c != "protocol"]):
        values = sorted(set(t[c].to_list()))
        if len(values) > 1 or c == "protocol":
            parts.append(f"{c}: {', '.join(values[:shown])}" + (" ..." if len(values) > shown else ""))
    items = sorted(set(t["item_id"].to_list()))
    parts.append(f"{len(items)} item ids, e.g. {', '.join(items[:3])}")
    return "the run holds " + "; ".join(parts)
