"""DREAM-1K's own command (`Dream1kProtocol.cli_commands`), `capeval dream1k clips RUN`: the per-clip recall,
precision and F1 of a run's DREAM-1K verdicts (metrics.clip_table), with the release's attributes (source,
duration, subjects, shots, events) when the run's items can be read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from capeval.engine.errors import UsageError
from capeval.engine.protocols.base import CommandTools

from .metrics import clip_table

USAGE = """examples:
  capeval dream1k clips runs/demo                        # every DREAM-1K clip of the run folder, as a table
  capeval dream1k clips runs/demo --out clips.csv        # ... written to a CSV (or .parquet / .jsonl)
  capeval dream1k clips verdicts.parquet --items DREAM-1k.jsonl   # a `capeval judge --out` table

A clip is one (caption group, clip, judge trial): official rows show the accepted replies' scores (a Failed clip has
success = false and no values), strict rows entailed / judged events each way. Values are fractions (0-1).
"""


#: the columns printed (the written table has them all: counts, trial, duration, hit numbers)
PRINTED = ["captioner", "prompt_id", "item_id", "mode", "source", "success", "recall", "precision", "f1"]


def register(subparsers, tools: CommandTools) -> None:
    p = subparsers.add_parser("dream1k", help="DREAM-1K tools (per-clip scores)")
    sub = p.add_subparsers(dest="dream1k_command", metavar="SUBCOMMAND")
    c = sub.add_parser("clips", help="per-clip recall / precision / F1 of a run's DREAM-1K verdicts",
                       epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("run", type=Path, help="a run folder (capeval sweep) or a verdict table (capeval judge --out)")
    c.add_argument("--items", type=Path, default=None,
                   help="DREAM-1k.jsonl (the release's attributes per clip; default: the run's own dataset)")
    c.add_argument("--out", type=Path, default=None, help="write the table (.csv, .parquet or .jsonl)")
    c.add_argument("--limit", type=int, default=20, help="rows printed (default 20; the file has them all)")
    c.add_argument("--debug", action="store_true", help="show tracebacks")
    c.set_defaults(func=run_clips)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _items(args, run) -> pl.DataFrame | None:
    from capeval.engine.datasets.registry import load  # deferred: the dataset kinds (registry entry points)
    from capeval.engine.report.rundir import load_items  # deferred: the run folder reader (views)

    if args.items is None:
        return load_items(run)
    if not args.items.is_file():
        raise UsageError(f"--items {args.items}: not found")
    loaded = load("dream1k", {"path": str(args.items.resolve())}, base_dir=Path.cwd(), out_dir=Path.cwd(),
                  name="dream1k")
    return pl.from_arrow(loaded.items)


def run_clips(args) -> int:
    from capeval.engine.report.rundir import load_run  # deferred: the run folder reader (views)

    try:
        run = load_run(args.run)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(f"{args.run}: {exc}") from None
    if run.verdicts is None:
        raise UsageError(f"{args.run}: the run holds no verdicts")
    column = "protocol_name" if "protocol_name" in run.verdicts.columns else "protocol"
    verdicts = run.verdicts.filter(pl.col(column) == "dream1k")
    if verdicts.height == 0:
        raise UsageError(f"{args.run}: no verdicts of protocol 'dream1k'")
    table = clip_table(verdicts, _items(args, run))
    if args.out is not None:
        _write(table, args.out)
    shown = table.select([c for c in ("protocol", "judge") if c in table.columns] + PRINTED).with_columns(pl.col("recall", "precision", "f1").round(3))
    with pl.Config(tbl_rows=max(args.limit, 1), tbl_cols=-1, tbl_width_chars=160, fmt_str_lengths=40):
        print(shown.head(args.limit))
    failed = table.filter(~pl.col("success")).height
    print(f"[dream1k clips] {table.height} clips, {failed} without every verdict"
          + (f" -> {args.out}" if args.out else ""), file=sys.stderr)
    return 0


def _write(table: pl.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        table.write_csv(path)
    elif suffix == ".parquet":
        table.write_parquet(path)
    elif suffix in (".jsonl", ".json"):
        table.write_ndjson(path)
    else:
        raise UsageError(f"--out {path}: use a .csv, .parquet or .jsonl file name")
