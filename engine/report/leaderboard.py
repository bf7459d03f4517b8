"""Leaderboards: per protocol, one wide table of headline metrics with CIs, plus the breakdown below it.

Rows are systems (captioner x prompt x frame spec [x judge] [x dataset]); columns are the protocol's headline
metrics as value, ci_low, ci_high. Every command that scores (`capeval sweep`, `score`, a benchmark's own score
subcommand, the HTML report) builds the same shape from a long-format metrics table with `leaderboards(metrics, ...)`.

Two things the long table does not say by itself, said here:
* an average over tasks that one undefined task made null (a protocol's average over its tasks is nan when one
  task's F1 is, as some official scripts compute it) is replaced by the mean of the DEFINED tasks, with a note
  naming the tasks left out and no CI (the bootstrap replicates of that mean are not in the table);
* intervals that rest on fewer than MIN_VIDEOS videos, and degenerate intervals (low == high, e.g. [100, 100]
  from a handful of videos that all agree), get a warning;
* a null value says why (`<m>_reason`, from the results' `reason` column): "no verdicts: <first error> (xN)" for a
  system without a single verdict, never a number and never a bare dash.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from capeval.engine.metrics.reasons import is_no_verdicts
from capeval.engine.registry import lookup
from capeval.engine.schemas import METRIC_VALUE_NAMES
from capeval.engine.warning_groups import WarningGroups

#: labels that mark an overall row in a breakdown column ("avg" rows are averages over that column)
OVERALL_LABELS = ("all", "avg", "overall", "-")
#: what tells systems apart; a column is shown when it varies (judge seeds: one row per seed, as the results table)
SYSTEM_COLUMNS = ["dataset", "captioner", "prompt_id", "prompt_set", "frame_spec", "judge", "seed"]
ALWAYS_SHOWN = ("captioner", "prompt_id", "frame_spec")
VALUE_COLUMNS = METRIC_VALUE_NAMES
#: below this many videos a bootstrap interval is rough: say so
MIN_VIDEOS = 20


@dataclass
class Leaderboard:
    protocol: str
    system_columns: list[str]
    metrics: list[str]
    table: pl.DataFrame  # one row per system: system columns, <m>, <m>_low, <m>_high per metric, n, n_videos, note,
    #                      <m>_reason per metric (why <m> is null; null when it has a value)
    breakdown: pl.DataFrame  # system columns + breakdown columns + one "<m>" column per metric (value [low, high])
    breakdown_columns: list[str]
    warnings: list[str] = field(default_factory=list)
    #: (metric, one-line definition) of the metrics shown, as the protocol declares them (its legend)
    definitions: list[tuple[str, str]] = field(default_factory=list)


def to_long(frame: pl.DataFrame) -> pl.DataFrame:
    """A wide metrics table (`<m>`, `<m>_ci_low`, `<m>_ci_high` columns, as a benchmark's own score subcommand writes)
    in the long format (metric, value, ci_low, ci_high); a long table is returned as it is."""
    if "metric" in frame.columns:
        return frame
    metrics = [c for c in frame.columns if f"{c}_ci_low" in frame.columns and f"{c}_ci_high" in frame.columns]
    if not metrics:
        raise ValueError(f"not a metrics table: no `metric` column and no <m>/<m>_ci_low/<m>_ci_high columns "
                         f"(have {frame.columns})")
    value_cols = {c for m in metrics for c in (m, f"{m}_ci_low", f"{m}_ci_high")}
    keep = [c for c in frame.columns if c not in value_cols]
    parts = [frame.select(*keep, pl.lit(m).alias("metric"), pl.col(m).cast(pl.Float64).alias("value"),
                          pl.col(f"{m}_ci_low").cast(pl.Float64).alias("ci_low"),
                          pl.col(f"{m}_ci_high").cast(pl.Float64).alias("ci_high")) for m in metrics]
    long = pl.concat(parts, how="vertical")
    for c in ("n", "n_no_verdict"):
        if c not in long.columns:
            long = long.with_columns(pl.lit(None, dtype=pl.Int64).alias(c))
    return long


def headline_metrics(protocol: str) -> list[str]:
    """The protocol's headline metrics in display order (its `headline` declaration); empty for a protocol that is
    not registered or declares none (its leaderboard then shows every overall metric)."""
    try:
        return list(lookup("protocol", protocol).headline)
    except KeyError:
        return []


def metric_definitions(protocol: str, metrics: list[str]) -> list[tuple[str, str]]:
    """(metric, definition) for the given metrics, in their order, from the protocol's `metric_definitions`
    declaration; metrics it does not define are left out (an unregistered protocol defines none)."""
    try:
        declared = dict(lookup("protocol", protocol).metric_definitions)
    except KeyError:
        return []
    return [(m, declared[m]) for m in metrics if m in declared]


def protocol_of(metrics: pl.DataFrame, protocol: str | None) -> str:
    if protocol:
        return protocol
    if "protocol" in metrics.columns and metrics["protocol"].n_unique() == 1:
        return str(metrics["protocol"][0])
    raise ValueError("metrics table spans several protocols (or names none): pass protocol=")


def split_columns(df: pl.DataFrame) -> tuple[list[str], list[str]]:
    """(system columns, breakdown columns). A breakdown column holds an overall label somewhere; other
    non-value columns (mode, prompt_set) describe the cell."""
    systems = [c for c in SYSTEM_COLUMNS if c in df.columns]
    rest = [c for c in df.columns if c not in systems + VALUE_COLUMNS + ["protocol", "cell_key", "trial"]]
    breakdown = [c for c in rest if df.schema[c] == pl.String
                 and df[c].is_in(list(OVERALL_LABELS)).any() and df[c].n_unique() > 1]
    shown = [c for c in systems if c in ALWAYS_SHOWN or df[c].n_unique() > 1]
    return shown or systems[:1], breakdown


def _overall_mask(df: pl.DataFrame, breakdown: list[str]) -> pl.Expr:
    expr = pl.lit(True)
    for c in breakdown:
        expr = expr & (pl.col(c).is_null() | pl.col(c).is_in(list(OVERALL_LABELS)))
    return expr


def _fmt(v, lo, hi, digits: int = 1) -> str:
    if v is None:
        return "-"
    if lo is None or hi is None:
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def leaderboard(metrics: pl.DataFrame, protocol: str | None = None, *, n_videos: pl.DataFrame | None = None,
                min_videos: int = MIN_VIDEOS) -> Leaderboard:
    """The leaderboard of one protocol from a long metrics table (results.parquet rows, or compute_metrics output).

    n_videos: optional table of system columns + `n_videos` (videos behind each system), for the small-sample
    warning; without it the warning uses nothing and says the count is unknown only in the table (null)."""
    metrics = to_long(metrics)
    protocol = protocol_of(metrics, protocol)
    df = metrics.filter(pl.col("protocol") == protocol) if "protocol" in metrics.columns else metrics
    if df.is_empty():
        raise ValueError(f"no metric rows for protocol {protocol!r}")
    if not any(c in df.columns for c in SYSTEM_COLUMNS):  # one system's table (a benchmark's score subcommand): name it
        df = df.with_columns(pl.lit("-").alias("captioner"))
    systems, breakdown = split_columns(df)
    df = df.with_columns(pl.col(c).cast(pl.String).fill_null("-") for c in systems)
    wanted = headline_metrics(protocol)
    present = list(dict.fromkeys(df["metric"].to_list()))
    names = [m for m in wanted if m in present] if wanted else present
    if not names:
        names = present
    overall = df.filter(_overall_mask(df, breakdown) & pl.col("metric").is_in(names))
    sys_rows = df.select(systems).unique(maintain_order=True)
    warnings: list[str] = []
    degenerate = WarningGroups()  # one line for all systems' degenerate intervals, not one per system and metric
    rows = []
    for sys_row in sys_rows.iter_rows(named=True):
        sel = overall
        for c in systems:
            sel = sel.filter(pl.col(c) == sys_row[c])
        row: dict = dict(sys_row)
        notes = []
        label = " ".join(f"{sys_row[c]}" for c in systems)
        for m in names:
            r = sel.filter(pl.col("metric") == m)
            v = lo = hi = reason = None
            if r.height:
                v, lo, hi = r["value"][0], r["ci_low"][0], r["ci_high"][0]
                reason = r["reason"][0] if "reason" in r.columns and v is None else None
                row.setdefault("n", r["n"][0])
                row.setdefault("n_no_verdict", r["n_no_verdict"][0])
            row[f"{m}_reason"] = reason
            if v is None and breakdown and not is_no_verdicts(reason):
                v, note = _defined_average(df, sys_row, systems, breakdown, m, overall_row=r)
                if note:
                    notes.append(note)
                    lo = hi = None
                    if v is not None:
                        row[f"{m}_reason"] = None
            row[m], row[f"{m}_low"], row[f"{m}_high"] = v, lo, hi
            if lo is not None and hi is not None and lo == hi:
                degenerate.add(f"{protocol}: degenerate interval (every resample gave the same value: too few or too "
                               f"uniform videos)", f"{label}: {m} [{lo:.1f}, {hi:.1f}]")
        row["note"] = "; ".join(notes) or None
        rows.append(row)
    warnings += degenerate.lines()
    table = pl.DataFrame(rows, infer_schema_length=None)
    for c in ("n", "n_no_verdict"):
        if c not in table.columns:
            table = table.with_columns(pl.lit(None, dtype=pl.Int64).alias(c))
    if n_videos is not None:
        on = [c for c in systems if c in n_videos.columns]
        nv = n_videos.select(on + ["n_videos"]).group_by(on).agg(pl.col("n_videos").max())
        table = table.join(nv, on=on, how="left", nulls_equal=True)
        small = table.filter(pl.col("n_videos") < min_videos)
        if small.height:  # one line, not one per system: a small demo would drown in them
            counts = sorted(set(small["n_videos"].to_list()))
            warnings.append(f"{protocol}: the intervals of {small.height} of {table.height} systems rest on "
                            f"{'/'.join(map(str, counts))} videos (< {min_videos}); read them as rough")
    else:
        table = table.with_columns(pl.lit(None, dtype=pl.Int64).alias("n_videos"))
    cols = systems + [c for m in names for c in (m, f"{m}_low", f"{m}_high")] + ["n", "n_no_verdict",
                                                                                   "n_videos", "note"]
    table = table.select(cols + [pl.col(f"{m}_reason").cast(pl.String) for m in names])
    return Leaderboard(protocol, systems, names, table, _breakdown(df, systems, breakdown, names), breakdown,
                       warnings, metric_definitions(protocol, names))


def videos_per_system(verdicts: pl.DataFrame) -> pl.DataFrame | None:
    """The videos behind each system of a verdict table (its system columns + n_videos), for `leaderboard`'s
    videos column and small-sample warning; None for a table without video ids."""
    if verdicts is None or "video_id" not in verdicts.columns:
        return None
    on = [c for c in SYSTEM_COLUMNS if c in verdicts.columns]
    if not on:
        return None
    return verdicts.with_columns(pl.col(c).cast(pl.String).fill_null("-") for c in on).group_by(on).agg(
        pl.col("video_id").n_unique().alias("n_videos"))


def _defined_average(df, sys_row, systems, breakdown, metric, overall_row) -> tuple[float | None, str | None]:
    """Mean of the defined values under an "avg" row whose value is null; (None, None) when not applicable."""
    if not overall_row.height:
        return None, None
    col = next((c for c in breakdown if overall_row[c][0] == "avg"), None)
    if col is None:
        return None, None
    sel = df.filter(pl.col("metric") == metric)
    for c in systems:
        sel = sel.filter(pl.col(c) == sys_row[c])
    for c in breakdown:
        if c != col:
            sel = sel.filter(pl.col(c).is_null() | pl.col(c).is_in(list(OVERALL_LABELS)))
    members = sel.filter(~pl.col(col).is_in(list(OVERALL_LABELS)))
    defined = members.filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
    if not defined.height:
        return None, f"{metric}: undefined for every {col}"
    left_out = sorted(set(members[col].to_list()) - set(defined[col].to_list()))
    mean = float(defined["value"].mean())
    return mean, (f"{metric}: mean of {defined.height}/{members.height} {col}s, undefined for "
                  f"{', '.join(left_out)}; no CI")


def _breakdown(df, systems, breakdown, names) -> pl.DataFrame:
    if not breakdown:
        return pl.DataFrame()
    rows = df.filter(~_overall_mask(df, breakdown) & pl.col("metric").is_in(names))
    if rows.is_empty():
        return pl.DataFrame()
    rows = rows.with_columns(pl.struct("value", "ci_low", "ci_high").map_elements(
        lambda s: _fmt(s["value"], s["ci_low"], s["ci_high"]), return_dtype=pl.String).alias("_cell"))
    wide = rows.pivot(on="metric", index=systems + breakdown, values="_cell", aggregate_function="first")
    return wide.select(systems + breakdown + [m for m in names if m in wide.columns])


def leaderboards(metrics: pl.DataFrame, *, n_videos: pl.DataFrame | None = None,
                 min_videos: int = MIN_VIDEOS, protocol: str | None = None) -> list[Leaderboard]:
    """One leaderboard per protocol of a long metrics table (protocol column, or `protocol=` for one table)."""
    metrics = to_long(metrics)
    if protocol is not None or "protocol" not in metrics.columns:
        return [leaderboard(metrics, protocol_of(metrics, protocol), n_videos=n_videos, min_videos=min_videos)]
    return [leaderboard(metrics, p, n_videos=n_videos, min_videos=min_videos)
            for p in dict.fromkeys(metrics["protocol"].to_list())]


def format_leaderboard(lb: Leaderboard, digits: int = 1, breakdown_rows: int = 40) -> str:
    """Plain text: the headline table (value [low, high]), the warnings, then the breakdown."""
    t = lb.table
    videos = t["n_videos"].is_not_null().any()  # a column that would read "-" on every row is left out
    header = lb.system_columns + lb.metrics + ["n"] + (["videos"] if videos else [])
    body = []
    for r in t.iter_rows(named=True):
        cells = [str(r[c]) for c in lb.system_columns]
        cells += [(null_label(r[f"{m}_reason"]) if r[m] is None else _fmt(r[m], r[f"{m}_low"], r[f"{m}_high"], digits))
                  + ("*" if r["note"] and m in r["note"] else "") for m in lb.metrics]
        cells += [str(r["n"]) + (f" (+{r['n_no_verdict']} no verdict)" if r["n_no_verdict"] else "")]
        cells += ["-" if r["n_videos"] is None else str(r["n_videos"])] if videos else []
        body.append(cells)
    lines = [f"== {lb.protocol} leaderboard (95% CI, bootstrap over videos) =="]
    lines += text_grid(header, body)
    width = max((len(m) for m, _ in lb.definitions), default=0)
    lines += [f"  {m.ljust(width)}  {definition}" for m, definition in lb.definitions]
    for r in t.filter(pl.col("note").is_not_null()).iter_rows(named=True):
        lines.append("  * " + " ".join(str(r[c]) for c in lb.system_columns) + ": " + r["note"])
    lines += [f"  ! {label}: {reason}" for label, reason in null_reasons(lb)]
    lines += [f"  warning: {w}" for w in lb.warnings]
    if lb.breakdown.height:
        lines.append(f"-- by {', '.join(lb.breakdown_columns)} --")
        shown = lb.breakdown.head(breakdown_rows)
        lines += text_grid(shown.columns, [[str(x) for x in row] for row in shown.iter_rows()])
        if lb.breakdown.height > breakdown_rows:
            lines.append(f"  ... {lb.breakdown.height - breakdown_rows} more rows (see the HTML report)")
    return "\n".join(lines)


def null_label(reason: str | None) -> str:
    """What a leaderboard cell without a value shows: "no verdicts!" or "undefined!" (the reason follows the
    table, after "!"), "-" when nothing says why."""
    if not reason:
        return "-"
    return "no verdicts!" if is_no_verdicts(reason) else "undefined!"


def null_reasons(lb: Leaderboard) -> list[tuple[str, str]]:
    """(system and metrics, reason) for every null headline value with a reason, one per system and reason."""
    out: dict[tuple[str, str], list[str]] = {}
    for r in lb.table.iter_rows(named=True):
        system = " ".join(str(r[c]) for c in lb.system_columns)
        for m in lb.metrics:
            if r[m] is None and r[f"{m}_reason"]:
                out.setdefault((system, r[f"{m}_reason"]), []).append(m)
    return [(f"{system} {', '.join(ms)}", reason) for (system, reason), ms in out.items()]


def text_grid(header: list[str], body: list[list[str]]) -> list[str]:
    """A plain-text table: the header, a rule, then the rows, each column padded to its widest cell."""
    widths = [max([len(h)] + [len(row[i]) for row in body]) for i, h in enumerate(header)]
    return (["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
            + ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in body])
