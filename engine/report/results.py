"""The sweep's results table: every cell's long-format metrics, written as Parquet + CSV and printed.

Rows: one per (cell, protocol-specific group, metric) with value, ci_low, ci_high, n and n_no_verdict. The cell
columns (dataset, captioner, prompt_id, frame_spec, protocol, judge) come first, then the protocol's own group
columns (null where a protocol has no such column), then the metric values. `n_no_verdict` is always shown: rows
without a verdict are counted, never dropped.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from engine.sweep.grid import CELL_COLUMNS

VALUE_COLUMNS = ["metric", "value", "ci_low", "ci_high", "n", "n_no_verdict"]


def results_table(metrics_store, cell_keys: list[str]) -> pl.DataFrame:
    """The stored metrics of `cell_keys` (in grid order), with a stable column order and row order."""
    if not metrics_store.segments():
        return pl.DataFrame(schema={c: pl.String for c in CELL_COLUMNS} | {"metric": pl.String, "value": pl.Float64})
    frames = [pl.read_parquet(p) for p in metrics_store.segments()]
    df = pl.concat(frames, how="diagonal_relaxed")
    order = {k: i for i, k in enumerate(dict.fromkeys(cell_keys))}
    df = df.filter(pl.col("cell_key").is_in(list(order)))
    # A cell appended twice (a crash between append and exit, then a rerun) keeps its first copy.
    df = df.unique(subset=[c for c in df.columns if c not in ("value", "ci_low", "ci_high")], keep="first",
                   maintain_order=True)
    df = df.with_columns(pl.col("cell_key").replace_strict(order, return_dtype=pl.Int64).alias("_cell_order"))
    group_cols = [c for c in df.columns if c not in CELL_COLUMNS + VALUE_COLUMNS + ["cell_key", "_cell_order"]]
    df = df.sort(["_cell_order"] + group_cols + ["metric"], nulls_last=True, maintain_order=True)
    return df.select(CELL_COLUMNS + group_cols + [c for c in VALUE_COLUMNS if c in df.columns])


def write_results(results: pl.DataFrame, out_dir: str | Path) -> tuple[Path, Path]:
    from engine.store.segments import write_parquet_atomic

    out = Path(out_dir)
    parquet = write_parquet_atomic(results.to_arrow(), out / "results.parquet")
    csv = out / "results.csv"
    tmp = out / ".results.csv.tmp"
    results.write_csv(tmp)
    tmp.replace(csv)
    return parquet, csv


def headline(results: pl.DataFrame, protocol_metrics: dict[str, list[str]] | None = None) -> pl.DataFrame:
    """A compact view for the terminal: each protocol's overall rows (its breakdown columns -- those holding an
    "all"/"avg" label -- at that label or null; cell attributes such as mode, seed, cell_status left alone)."""
    from engine.report.leaderboard import OVERALL_LABELS, split_columns

    if results.is_empty():
        return results
    if "value" not in results.columns:  # a caption-only sweep: its table holds captions, not metric values
        return caption_headline(results)
    parts = []
    for _, df in results.group_by("protocol", maintain_order=True) if "protocol" in results.columns else [
            (None, results)]:
        _, breakdown = split_columns(df)
        for c in breakdown:
            df = df.filter(pl.col(c).is_null() | pl.col(c).cast(pl.String).is_in(list(OVERALL_LABELS)))
        parts.append(df)
    df = pl.concat(parts, how="diagonal_relaxed")
    if protocol_metrics:
        df = df.filter(pl.struct(["protocol", "metric"]).map_elements(
            lambda s: s["metric"] in protocol_metrics.get(s["protocol"], [s["metric"]]), return_dtype=pl.Boolean))
    cols = [c for c in CELL_COLUMNS + ["seed"] if c in df.columns
            and (df[c].n_unique() > 1 or c in ("captioner", "prompt_id", "frame_spec"))]
    return df.select(cols + [c for c in VALUE_COLUMNS if c in df.columns]).with_columns(
        pl.col("value", "ci_low", "ci_high").round(1)
    )


def caption_headline(captions: pl.DataFrame) -> pl.DataFrame:
    """One row per caption cell of a caption-only sweep's table: how many videos it has, how many got a caption
    (`captions`) and how many did not (`failed`, by item_status)."""
    cols = [c for c in ("dataset", "captioner", "prompt_id", "frame_spec") if c in captions.columns]
    ok = pl.col("item_status") == "ok" if "item_status" in captions.columns else pl.lit(True)
    return captions.group_by(cols, maintain_order=True).agg(
        pl.len().alias("videos"), ok.sum().alias("captions"), (~ok).sum().alias("failed"))


def format_table(df: pl.DataFrame, max_rows: int = 60) -> str:
    with pl.Config(tbl_rows=max_rows, tbl_cols=20, tbl_width_chars=200, fmt_str_lengths=40,
                   tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        return str(df)
