"""`capeval score`: metrics from a verdict table, with video-clustered bootstrap CIs, as CSV and a printed table.

Takes any registered protocol (builtin or an entry point's) and computes its metrics through the protocol object
(`JudgeProtocol.compute_metrics` with its `metric_params`, as a sweep does), so a new protocol needs no change here. The verdict table is checked first (engine/inputs/verdicts.py): duplicate verdict rows and verdict
codes that are not integers are errors naming the rows, never narrower CIs or a traceback. `--by COLUMN[,COLUMN]`
adds the metrics per level of item attributes (engine/metrics/breakdowns.py, docs/breakdowns.md);
engine/cli/breakdowns.py gives `capeval judge` the same flag."""

from __future__ import annotations

import sys
from pathlib import Path

from capeval.engine.cli.breakdowns import add_by_option
from capeval.engine.cli.options import add_protocol_options
from capeval.engine.errors import UsageError
from capeval.engine.inputs import read_captions, read_verdicts
from capeval.engine.judge_run.breakdowns import add_breakdowns, check_by
from capeval.engine.judge_run.inputs import caption_file_rules, load_items, lookup_protocol
from capeval.engine.judge_run.options import check_out, protocol_params
from capeval.engine.metrics.reasons import explain_nulls
from capeval.engine.registry import lookup, names
from capeval.engine.report.leaderboard import videos_per_system
from capeval.engine.report.metrics_text import format_table
from capeval.engine.safetext import terminal_text


def register(sub) -> None:
    p = sub.add_parser("score", help="compute a protocol's metrics (with CIs) from a verdict table")
    p.add_argument("--protocol", required=True, choices=names("protocol"))
    folders = "".join(f", or with --protocol {name} a {lookup('protocol', name).released_verdicts_folder} (needs "
                      f"--items)" for name in _folder_readers())
    p.add_argument("--verdicts", required=True, type=Path, help="verdicts (Parquet as `capeval judge` writes; "
                   f"JSONL or CSV with the VERDICTS columns){folders}")
    p.add_argument("--items", type=Path, help="items file (question types, categories, durations): "
                   "JSONL/CSV/Parquet, or a dataset folder of a kind the protocol reads")
    p.add_argument("--captions", type=Path, help="captions file (n_tokens, for metrics that read caption lengths)")
    p.add_argument("--out", required=True, type=Path, help="CSV file to write (long format, one row per metric)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples over videos (0: no CIs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--paper-compatible", action="store_true",
                   help="leave rows without a verdict out of denominators, as the official scripts do")
    add_protocol_options(p)
    add_by_option(p)
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def score(protocol: str, verdicts, *, items=None, captions=None, n_resamples: int = 1000, seed: int = 0, **options):
    """compute_metrics of the registered `protocol` (importable API behind the command), with a `reason` for every
    null value (a group without a single verdict: "no verdicts: <first error> (xN)"); only the params its metrics
    read are passed (`metric_params`: a sweep's protocol params include build-only ones such as `prompts`)."""
    found = lookup_protocol(protocol)
    frame = found.compute_metrics(verdicts, items=items, captions=captions, n_resamples=n_resamples, seed=seed,
                                  **found.metric_params(options))
    return explain_nulls(frame, verdicts, captions=captions)


def _folder_readers() -> list[str]:
    """The registered protocols that read released verdicts from a folder (`released_verdicts_folder`)."""
    return [name for name in names("protocol") if lookup("protocol", name).released_verdicts_folder]


def _items(path: Path | None, protocol: str):
    """ITEMS as read for `protocol` (a pyarrow Table), None without --items."""
    if path is None:
        return None
    return load_items(path, None, None, protocol)


def read_verdicts_or_release(path: Path, protocol: str, items):
    """--verdicts: a verdict table, or a folder of the benchmark's released verdicts where the protocol reads one
    (`released_verdicts_folder`), as `capeval judge validate --reference` reads them; any other folder is answered
    with what it holds."""
    if not path.is_dir():
        return read_verdicts(path)
    found = lookup_protocol(protocol)
    if found.released_verdicts_folder is not None:
        if items is None:
            raise UsageError(f"--verdicts {path}: a folder is read as --protocol {protocol}'s "
                             f"{found.released_verdicts_folder}, whose verdicts need the items: give --items")
        verdicts, n_unknown = found.released_verdicts(path, items, "--verdicts")
        if n_unknown:
            print(f"note: {n_unknown} released judgments are for ids that are no item of --items: left out",
                  file=sys.stderr)
        return verdicts
    entries = sorted(e.name + ("/" if e.is_dir() else "") for e in path.iterdir())
    held = ", ".join(entries[:8]) + (", ..." if len(entries) > 8 else "") if entries else "nothing"
    hint = " (a sweep's run folder: `capeval report` scores it)" if (path / "verdicts").is_dir() else ""
    readers = "".join(f", or for --protocol {name} a {lookup('protocol', name).released_verdicts_folder}"
                      for name in _folder_readers())
    raise UsageError(f"--verdicts {path}: a folder; capeval score reads a verdict table (Parquet, JSONL or CSV with "
                     f"the VERDICTS columns){readers}. This folder holds: {held}{hint}")


def _captions(path: Path | None, rules: dict):
    import polars as pl

    if path is None:
        return None
    return pl.from_arrow(read_captions(path, **rules))


def run(args) -> int:
    import polars as pl

    if args.resamples < 0:
        raise UsageError(f"--resamples must be >= 0, got {args.resamples}")
    check_out(args.out)
    options = protocol_params(args.protocol, args.param, args.mode, args.prompts)
    if args.paper_compatible:
        options["paper_compatible"] = True
    items = _items(args.items, args.protocol)
    verdicts = read_verdicts_or_release(args.verdicts, args.protocol, items)
    items = None if items is None else pl.from_arrow(items)
    captions = _captions(args.captions, caption_file_rules(args.protocol, options))  # read as `judge` read them
    check_by(args.by, items, verdicts)

    def compute(v, items=None, captions=None):  # the unsplit run, and each --by level alike
        return score(args.protocol, v, items=items, captions=captions, n_resamples=args.resamples, seed=args.seed,
                     **options)

    frame = compute(verdicts, items=items, captions=captions)
    frame = add_breakdowns(frame, compute, verdicts, args.by, protocol=args.protocol, items=items, captions=captions,
                           params=options, show=not args.quiet)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.write_csv(args.out)
    if not args.quiet:
        videos = videos_per_system(verdicts if isinstance(verdicts, pl.DataFrame) else pl.from_arrow(verdicts))
        # the leaderboard and its breakdown; every metric row is in --out
        print(terminal_text(format_table(frame, n_videos=videos, every_row=False)))
    n_nv = int(frame["n_no_verdict"].max()) if frame.height else 0
    print(f"wrote {frame.height} metric rows to {args.out}" + (f" ({n_nv} rows without a verdict in the largest group)"
                                                                if n_nv else ""))
    return 0
