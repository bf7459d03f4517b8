"""`capeval align`: how well a caption metric or a judge agrees with human ratings (human alignment).

Ratings: `--dataset KIND --data DIR`, a registered dataset kind that carries human ratings (its `ratings` loader;
e.g. `vatex_eval`: 3,000 videos x 6 candidates x 3 annotators), or `--ratings FILE`, any table (Parquet, CSV, JSON
lines) with `video_id`, `candidate_index` and one column per annotator (`--rating-columns`, default: every column
whose name starts with "rating").
Scores: `--scores FILE` keyed by `video_id`, `candidate_index`, the value in `--column` (default `score`). A verdict
table (capeval.engine.schemas.VERDICTS, e.g. a protocol that scores a caption 1-5) works the same way: the candidate
comes from `item_id` "<video>/<k>" (as a rating dataset kind names its items), the value is the verdict code (+1, so
that codes 0-4 read as a 1-5 scale), and rows without a verdict are left out and counted.

Printed figures (EMScore's meta-evaluation protocol, which caption-metric papers report): tau_b and rho = the mean
over annotators of Kendall tau_b / Spearman rho against that annotator; `*_mean_human` against the mean rating; fractions, unrounded unless
`--round4`; bootstrap CIs resample videos (`--resamples`, 0 = none).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from capeval.engine.datasets.jsonl import DatasetFormatError
from capeval.engine.datasets.registry import DatasetKind
from capeval.engine.errors import UsageError
from capeval.engine.metrics.alignment import align
from capeval.engine.registry import lookup

USAGE = """examples:
  capeval align --dataset vatex_eval --data ../shared/data/vatex_eval \\
      --scores ../shared/data/vatex_eval/metric_scores.parquet --column cider_9ref --json
  capeval align --ratings my_ratings.csv --rating-columns r1,r2 --scores verdicts.parquet --json
"""
KEYS = ["video_id", "candidate_index"]


def register(sub) -> None:
    p = sub.add_parser("align", help="rank correlation of a metric or judge with human ratings (VATEX-EVAL, ...)",
                       epilog=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", metavar="KIND", help="a dataset kind that carries human ratings, e.g. vatex_eval "
                     "(needs --data)")
    src.add_argument("--ratings", type=Path, help="table with video_id, candidate_index and one column per annotator")
    p.add_argument("--data", type=Path, help="folder of the --dataset release")
    p.add_argument("--rating-columns", help="comma-separated annotator columns of --ratings (default: rating*)")
    p.add_argument("--scores", required=True, type=Path, help="scores keyed by video_id, candidate_index, or verdicts")
    p.add_argument("--column", help="score column (default: score; for a verdict table: the verdict)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples over videos (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--round4", action="store_true", help="EMScore's rounding: metric and averages to 4 decimals")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(func=run)


def verdict_score_offset(verdicts) -> int:
    """What turns the verdict codes of one registered protocol's table into its judge's scores
    (JudgeProtocol.verdict_score_offset); 0 for a table of several protocols or of an unregistered one."""
    protocols = set(verdicts["protocol"].unique()) if "protocol" in verdicts.columns else set()
    if len(protocols) != 1:
        return 0
    try:
        return lookup("protocol", next(iter(protocols))).verdict_score_offset
    except KeyError:
        return 0


def read_table(path: Path, what: str):
    import polars as pl

    if not path.is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pl.read_parquet(path)
        if suffix in (".csv", ".tsv"):
            return pl.read_csv(path, separator="\t" if suffix == ".tsv" else ",")
        if suffix in (".jsonl", ".ndjson"):
            return pl.read_ndjson(path)
        if suffix == ".json":
            return pl.read_json(path)
    except Exception as exc:  # polars raises several types for a malformed file
        raise UsageError(f"{what} file {path}: cannot be read as {suffix[1:]}: {exc}") from exc
    raise UsageError(f"{what} file {path}: unknown format {suffix!r} (use .parquet, .csv, .tsv, .jsonl or .json)")


def rating_kind(name: str) -> DatasetKind:
    """The registered dataset kind `name`, refused unless it carries human ratings."""
    try:
        kind = lookup("dataset_kind", name)
    except KeyError as exc:
        raise UsageError(str(exc.args[0])) from None
    if kind.ratings is None:
        raise UsageError(f"--dataset {name}: dataset kind {name!r} carries no human ratings")
    return kind


def ratings_table(args):
    import polars as pl

    if args.dataset is not None:
        kind = rating_kind(args.dataset)
        if args.data is None:
            raise UsageError(f"--dataset {args.dataset} needs --data DIR ({kind.param('path').doc})")
        try:
            table = kind.ratings(args.data)
        except DatasetFormatError as exc:
            raise UsageError(str(exc)) from None
    else:
        table = read_table(args.ratings, "ratings")
    missing = [k for k in KEYS if k not in table.columns]
    if missing:
        raise UsageError(f"ratings: columns {missing} are required (have {table.columns})")
    if args.rating_columns:
        columns = [c.strip() for c in args.rating_columns.split(",") if c.strip()]
        absent = [c for c in columns if c not in table.columns]
        if absent:
            raise UsageError(f"ratings: --rating-columns {absent} not in the table (have {table.columns})")
    else:
        columns = [c for c in table.columns if c.startswith("rating")]
    if not columns:
        raise UsageError(f"ratings: no annotator columns (name them with --rating-columns; have {table.columns})")
    table = table.with_columns(pl.col("video_id").cast(pl.String), pl.col("candidate_index").cast(pl.Int64),
                               *[pl.col(c).cast(pl.Float64) for c in columns])
    return table, columns


def scores_table(path: Path, column: str | None):
    """(video_id, candidate_index, score, no_verdict) from a score table or a verdict table."""
    import polars as pl

    table = read_table(path, "scores")
    if "verdict" in table.columns and (column in (None, "verdict")):
        if "candidate_index" not in table.columns:
            if "item_id" not in table.columns:
                raise UsageError("scores: a verdict table needs item_id '<video>/<k>' or a candidate_index column")
            parts = pl.col("item_id").cast(pl.String).str.split("/")
            table = table.with_columns(parts.list.last().cast(pl.Int64, strict=False).alias("candidate_index"),
                                       parts.list.slice(0, parts.list.len() - 1).list.join("/").alias("video_id"))
        offset = verdict_score_offset(table)
        no_verdict = pl.col("verdict").is_null() | (pl.col("verdict") < 0)
        table = table.with_columns(no_verdict.alias("no_verdict"),
                                   pl.when(no_verdict).then(None).otherwise(pl.col("verdict").cast(pl.Float64) + offset)
                                   .alias("score"))
        column = "score"
    else:
        column = column or "score"
        if column not in table.columns:
            raise UsageError(f"scores: no column {column!r} (have {table.columns}); pick one with --column")
        table = table.with_columns(pl.col(column).cast(pl.Float64).alias("score"),
                                   pl.col(column).is_null().alias("no_verdict"))
    missing = [k for k in KEYS if k not in table.columns]
    if missing:
        raise UsageError(f"scores: columns {missing} are required (have {table.columns})")
    table = table.select(pl.col("video_id").cast(pl.String), pl.col("candidate_index").cast(pl.Int64), "score",
                         "no_verdict")
    dup = table.group_by(KEYS).len().filter(pl.col("len") > 1)
    if dup.height:
        first = dup.row(0, named=True)
        raise UsageError(f"scores: {dup.height} (video_id, candidate_index) keys occur more than once, e.g. "
                         f"{first['video_id']!r}/{first['candidate_index']}; keep one run (captioner, seed) per file")
    return table, column


def compute(ratings, rating_columns, scores, *, round4=False, n_resamples=1000, seed=0, confidence=0.95) -> dict:
    """The alignment figures for joined ratings x scores (importable API behind the command)."""
    import numpy as np

    joined = ratings.join(scores, on=KEYS, how="left")
    usable = joined.filter(joined["score"].is_not_null() & joined["score"].is_finite())
    n_no_verdict = int(joined["no_verdict"].fill_null(False).sum())
    if usable.height < 2:
        raise UsageError(f"only {usable.height} rated candidates have a score: nothing to correlate "
                         f"(check that the scores use the ratings' video ids and candidate indices)")
    human = np.column_stack([usable[c].to_numpy() for c in rating_columns])
    out = align(usable["score"].to_numpy(), human, usable["video_id"].to_numpy(), round4=round4,
                n_resamples=n_resamples, seed=seed, confidence=confidence)
    out["n_excluded"] = joined.height - usable.height
    out["n_no_verdict"] = n_no_verdict
    out["annotators"] = list(rating_columns)
    out["rounding"] = "emscore-4-decimals" if round4 else "none"
    return out


def run(args) -> int:
    if args.resamples < 0:
        raise UsageError(f"--resamples must be >= 0, got {args.resamples}")
    ratings, columns = ratings_table(args)
    scores, column = scores_table(args.scores, args.column)
    out = compute(ratings, columns, scores, round4=args.round4, n_resamples=args.resamples, seed=args.seed,
                  confidence=args.confidence)
    out = {"column": args.column or column, **out}
    if args.json:
        print(json.dumps(out, sort_keys=False))
        return 0
    ci = out["ci"]
    print(f"capeval align: {out['column']} vs {len(columns)} annotators, {out['n']} candidates in {out['n_videos']} "
          f"videos ({out['n_excluded']} excluded, {out['n_no_verdict']} without a verdict)")
    for key in ("tau_b", "rho", "tau_c", "tau_b_mean_human", "rho_mean_human", "tau_c_mean_human"):
        bounds = ci.get(key)
        interval = f"  [{bounds[0]:.4f}, {bounds[1]:.4f}]" if bounds and bounds[0] is not None else ""
        print(f"  {key:<17} {out[key]:.4f}{interval}")
    if not args.json:
        print("(tau_b, rho: mean over annotators of the per-annotator correlation, EMScore's protocol)", file=sys.stderr)
    return 0
