"""`capeval score`: metrics from a verdict table, with video-clustered bootstrap CIs, as CSV and a printed table.

Dispatches to engine/protocols/<protocol>/metrics.py:compute_metrics by module name, so a new protocol needs no
change here."""

from __future__ import annotations

import importlib
from pathlib import Path

PROTOCOLS = ("capquiz", "lvcap", "capability", "vidcapbench", "vcinspector")


def register(sub) -> None:
    p = sub.add_parser("score", help="compute a protocol's metrics (with CIs) from a verdict table")
    p.add_argument("--protocol", required=True, choices=PROTOCOLS)
    p.add_argument("--verdicts", required=True, type=Path, help="verdicts Parquet file (engine.schemas.VERDICTS)")
    p.add_argument("--items", type=Path, help="items Parquet file (question types, categories, durations)")
    p.add_argument("--captions", type=Path, help="captions Parquet file (n_tokens, for VidCapBench's conciseness)")
    p.add_argument("--out", required=True, type=Path, help="CSV file to write (long format, one row per metric)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples over videos (0: no CIs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--paper-compatible", action="store_true",
                   help="leave rows without a verdict out of denominators, as the official scripts do")
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def _read(path: Path | None, what: str):
    import polars as pl

    if path is None:
        return None
    if not path.is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    try:
        return pl.read_parquet(path)
    except Exception as exc:  # polars raises several types for a non-Parquet file
        raise ValueError(f"{what} file {path} is not a readable Parquet file: {exc}") from exc


def score(protocol: str, verdicts, *, items=None, captions=None, n_resamples: int = 1000, seed: int = 0, **options):
    """compute_metrics of `protocol` (importable API behind the command)."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    module = importlib.import_module(f"engine.protocols.{protocol}.metrics")
    return module.compute_metrics(verdicts, items=items, captions=captions, n_resamples=n_resamples, seed=seed,
                                  **options)


def run(args) -> int:
    from engine.metrics.report import format_table

    if args.resamples < 0:
        raise ValueError(f"--resamples must be >= 0, got {args.resamples}")
    verdicts = _read(args.verdicts, "verdicts")
    options = {"paper_compatible": True} if args.paper_compatible else {}
    frame = score(args.protocol, verdicts, items=_read(args.items, "items"), captions=_read(args.captions, "captions"),
                  n_resamples=args.resamples, seed=args.seed, **options)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame.write_csv(args.out)
    if not args.quiet:
        print(format_table(frame))
    n_nv = int(frame["n_no_verdict"].max()) if frame.height else 0
    print(f"wrote {frame.height} metric rows to {args.out}" + (f" ({n_nv} rows without a verdict in the largest group)"
                                                                if n_nv else ""))
    return 0
