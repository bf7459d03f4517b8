"""The sweep's results table: every cell's long-format metrics, written as Parquet + CSV and printed.

Rows: one per (cell, protocol-specific group, metric) with value, ci_low, ci_high, n and n_no_verdict. The cell
columns (dataset, captioner, prompt_id, frame_spec, protocol, judge) come first, then the protocol's own group
columns (null where a protocol has no such column), then the metric values. `n_no_verdict` is always shown: rows
without a verdict are counted, never dropped. A null value has its `reason` (engine/metrics/reasons.py): a cell
without a single verdict says "no verdicts: <first error> (xN)", never shows a number.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from capeval.engine.schemas import METRIC_VALUE_NAMES

from capeval.engine.report.leaderboard import OVERALL_LABELS, split_columns
from capeval.engine.store.segments import write_parquet_atomic
from capeval.engine.sweep.grid import CELL_COLUMNS

VALUE_COLUMNS = METRIC_VALUE_NAMES


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
    df = _with_reason(df)
    group_cols = [c for c in df.columns if c not in CELL_COLUMNS + VALUE_COLUMNS + ["cell_key", "_cell_order"]]
    df = df.sort(["_cell_order"] + group_cols + ["metric"], nulls_last=True, maintain_order=True)
    return df.select(CELL_COLUMNS + group_cols + [c for c in VALUE_COLUMNS if c in df.columns])


def _with_reason(df: pl.DataFrame) -> pl.DataFrame:
    """A `reason` column in any case; cells committed before reasons existed have none, and their rows with no
    verdict at all (n = 0, rows without one) get a null value instead of the number their formula made of that."""
    if "reason" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("reason"))
    if not {"n", "n_no_verdict", "value"} <= set(df.columns):
        return df
    legacy = pl.col("reason").is_null() & (pl.col("n") == 0) & (pl.col("n_no_verdict") > 0)
    return df.with_columns(
        *[pl.when(legacy).then(None).otherwise(pl.col(c)).alias(c) for c in ("value", "ci_low", "ci_high")
          if c in df.columns],
        pl.when(legacy).then(pl.format("no verdicts ({} rows without one)", pl.col("n_no_verdict")))
        .otherwise(pl.col("reason")).alias("reason"))


def write_results(results: pl.DataFrame, out_dir: str | Path) -> tuple[Path, Path]:
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
    if results.is_empty():
        return results
    if "value" not in results.columns:  # a caption-only sweep: its table holds captions, not metric values
        return caption_headline(results)
    df = overall_rows(results)
    if protocol_metrics:
        df = df.filter(pl.struct(["protocol", "metric"]).map_elements(
            lambda s: s["metric"] in protocol_metrics.get(s["protocol"], [s["metric"]]), return_dtype=pl.Boolean))
    cols = [c for c in CELL_COLUMNS + ["seed"] if c in df.columns
            and (df[c].n_unique() > 1 or c in ("captioner", "prompt_id", "frame_spec"))]
    return df.select(cols + [c for c in VALUE_COLUMNS if c in df.columns]).with_columns(
        pl.col("value", "ci_low", "ci_high").round(1)
    )


def overall_rows(results: pl.DataFrame) -> pl.DataFrame:
    """Each protocol's overall rows of a results table (breakdown columns at an overall label or null)."""
    parts = []
    for _, df in results.group_by("protocol", maintain_order=True) if "protocol" in results.columns else [
            (None, results)]:
        _, breakdown = split_columns(df)
        for c in breakdown:
            df = df.filter(pl.col(c).is_null() | pl.col(c).cast(pl.String).is_in(list(OVERALL_LABELS)))
        parts.append(df)
    return pl.concat(parts, how="diagonal_relaxed")


def cells_without_value(results: pl.DataFrame) -> list[dict]:
    """For run.json: {system (cell labels), metrics, reason} of each cell's overall metrics left null."""
    if results.is_empty() or "value" not in results.columns or "reason" not in results.columns:
        return []
    df = overall_rows(results)
    return null_reasons(df.select([c for c in CELL_COLUMNS + ["seed"] if c in df.columns] + ["metric", "value",
                                                                                          "reason"]))


def caption_headline(captions: pl.DataFrame) -> pl.DataFrame:
    """One row per caption cell of a caption-only sweep's table: how many videos it has, how many got a caption
    (`captions`) and how many did not (`failed`, by item_status)."""
    cols = [c for c in ("dataset", "captioner", "prompt_id", "frame_spec") if c in captions.columns]
    ok = pl.col("item_status") == "ok" if "item_status" in captions.columns else pl.lit(True)
    return captions.group_by(cols, maintain_order=True).agg(
        pl.len().alias("videos"), ok.sum().alias("captions"), (~ok).sum().alias("failed"))


def format_table(df: pl.DataFrame, max_rows: int = 60) -> str:
    """The table, then one line per system and reason for the values it leaves null (a reason is too long for a
    table cell: it names the first error)."""
    shown = df.drop("reason") if "reason" in df.columns else df
    with pl.Config(tbl_rows=max_rows, tbl_cols=20, tbl_width_chars=200, fmt_str_lengths=40,
                   tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        text = str(shown)
    lines = [f"  {' '.join(str(v) for v in r['system'].values())}: {', '.join(r['metrics'])}: {r['reason']}"
             for r in null_reasons(df)]
    return text + ("\nno value (null):\n" + "\n".join(lines) if lines else "")


def null_reasons(df: pl.DataFrame) -> list[dict]:
    """{system, metrics, reason} per system and reason of the rows whose value is null (run.json, the terminal);
    the system is the row's non-value columns (cell labels, breakdown labels)."""
    if "reason" not in df.columns or "value" not in df.columns:
        return []
    rows = df.filter(pl.col("value").is_null() & pl.col("reason").is_not_null())
    if rows.is_empty():
        return []
    system = [c for c in rows.columns if c not in VALUE_COLUMNS and c not in ("cell_key", "cell_status")]
    groups = rows.group_by([*system, "reason"], maintain_order=True).agg(pl.col("metric").unique(maintain_order=True))
    return [{"system": {c: r[c] for c in system}, "metrics": r["metric"], "reason": r["reason"]}
            for r in groups.iter_rows(named=True)]
