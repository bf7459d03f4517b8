"""A verdict table for `capeval score`, checked: a duplicated row would narrow the CIs, a float or NaN verdict
would end in a traceback. Parquet (as `capeval judge` writes), JSONL or CSV."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from capeval.engine.errors import UsageError
from capeval.engine.inputs.rows import not_utf8, table_format

#: the columns that identify one verdict (those present are used); a repeat is a duplicate
IDENTITY = ("cell_key", "protocol", "task", "item_id", "video_id", "captioner", "prompt_id", "frame_spec", "step",
            "sub_index", "judge", "seed", "trial")


def _read(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise UsageError(f"verdicts file not found: {path}")
    fmt = table_format(path)
    try:
        if fmt == "parquet":
            return pl.read_parquet(path)
        if fmt in ("csv", "tsv"):
            return pl.read_csv(path, separator="\t" if fmt == "tsv" else ",", infer_schema_length=None)
        return pl.read_ndjson(path, infer_schema_length=None)
    except Exception as exc:  # noqa: BLE001 - polars raises several types for a malformed file
        # polars names no line for bad UTF-8; the line scan does (None for a text file that decodes)
        raise (fmt != "parquet" and not_utf8(path)) or UsageError(
            f"{path}: not a readable {fmt} verdict table ({exc})") from None


def check_verdicts(df: pl.DataFrame, path: str | Path = "verdicts") -> pl.DataFrame:
    """`df` with an integer `verdict` column and no duplicate verdicts, or a UsageError naming rows."""
    for col in ("item_id", "verdict"):
        if col not in df.columns:
            raise UsageError(f"{path}: column {col!r} is missing (have {df.columns})")
    if "video_id" not in df.columns:
        df = df.with_columns(pl.col("item_id").alias("video_id"))
    v = df["verdict"]
    if v.dtype.is_float():
        bad = df.with_row_index("row").filter(v.is_null() | v.is_nan() | (v != v.round(0)))
        if bad.height:
            rows = (bad["row"] + 1).to_list()[:5]
            raise UsageError(f"{path}: column 'verdict' holds {bad.height} value(s) that are not integer codes "
                             f"(NaN, null or fractional) at row(s) {rows}: e.g. {bad['verdict'][0]!r}")
        df = df.with_columns(pl.col("verdict").cast(pl.Int8))
    elif v.dtype.is_integer():
        if v.null_count():
            rows = (df.with_row_index("row").filter(pl.col("verdict").is_null())["row"] + 1).to_list()[:5]
            raise UsageError(f"{path}: column 'verdict' has {v.null_count()} empty value(s) at row(s) {rows}")
        df = df.with_columns(pl.col("verdict").cast(pl.Int8))
    else:
        raise UsageError(f"{path}: column 'verdict' must hold integer codes, got {v.dtype}")
    ident = [c for c in IDENTITY if c in df.columns]
    dup = df.with_row_index("row").filter(pl.struct(ident).is_duplicated())
    if dup.height:
        first = dup.group_by(ident, maintain_order=True).agg(pl.col("row") + 1).head(5)
        shown = "; ".join(f"{r['item_id']} rows {r['row']}" for r in first.iter_rows(named=True))
        raise UsageError(f"{path}: {dup.height} duplicate verdict rows (same {', '.join(ident)}): {shown}. "
                         f"A verdict file concatenated with itself would narrow the CIs; remove the repeats")
    return df


def read_verdicts(path: str | Path) -> pl.DataFrame:
    path = Path(path)
    return check_verdicts(_read(path), path)
