"""Breakdown tables: a protocol's headline metrics per level of an item attribute, from the rows that `--by` or a
sweep's `[options] breakdowns` added to a metrics table (engine/metrics/breakdowns.py: column `by` names the
attribute, the attribute's column holds the level, `level_videos` the videos it rests on).

One table per protocol and attribute: a row per system and level ("all" first: the unsplit run), each headline
metric as value [ci_low, ci_high] read the way the leaderboard reads it (engine/report/leaderboard.py: an "avg"
over tasks, reasons for null values), n, and the level's videos. A level resting on fewer than MIN_VIDEOS videos is
marked and warned about, by the leaderboard's rule.

`run_breakdowns` computes such rows for a run folder after the fact (`capeval report RUN --by COLUMN`): per cell,
the protocol's metrics on the cell's verdicts and the items the sweep file names, with the sweep's params and
resamples.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import polars as pl

from capeval.engine.metrics.breakdowns import (ALL, BY_COLUMN, VIDEOS_COLUMN, UnknownColumnError, level_order, parse_by,
                                       with_breakdowns)
from capeval.engine.metrics.reasons import explain_nulls
from capeval.engine.registry import lookup
from capeval.engine.report.leaderboard import MIN_VIDEOS, leaderboard, null_label, text_grid, to_long
from capeval.engine.report.rundir import CELL_COLUMNS, RunData, load_items


@dataclass
class BreakdownTable:
    protocol: str
    column: str  # the attribute
    table: pl.DataFrame  # system columns, the attribute (level), one text column per headline metric, n, videos
    warnings: list[str] = field(default_factory=list)


def by_columns(metrics: pl.DataFrame) -> list[str]:
    """The attributes a metrics table is broken down by (its `by` column's values other than "all")."""
    if BY_COLUMN not in metrics.columns:
        return []
    return [c for c in dict.fromkeys(metrics[BY_COLUMN].drop_nulls().to_list()) if c != ALL and c in metrics.columns]


def _cell(row: dict, m: str, digits: int = 1) -> str:
    v, lo, hi = row[m], row[f"{m}_low"], row[f"{m}_high"]
    if v is None:
        return null_label(row.get(f"{m}_reason"))
    star = "*" if row.get("note") and m in row["note"] else ""
    ci = "" if lo is None or hi is None else f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    return f"{v:.{digits}f}{star}{ci}"


def breakdown_tables(metrics: pl.DataFrame, protocol: str | None = None,
                     min_videos: int = MIN_VIDEOS) -> list[BreakdownTable]:
    """One BreakdownTable per protocol (the `protocol` column, or `protocol=` for one protocol's table) and
    attribute; empty when the table has no breakdown rows."""
    metrics = to_long(metrics)
    attributes = by_columns(metrics)
    if not attributes:
        return []
    if protocol is not None or "protocol" not in metrics.columns:
        parts = [(protocol, metrics)]
    else:
        parts = [(p, metrics.filter(pl.col("protocol") == p)) for p in dict.fromkeys(metrics["protocol"].to_list())]
    out = []
    for name, df in parts:
        if name is None:
            raise ValueError("breakdown_tables: the table names no protocol: pass protocol=")
        for column in by_columns(df):
            out.append(_table(df, name, column, attributes, min_videos))
    return out


def _table(df: pl.DataFrame, protocol: str, column: str, attributes: list[str], min_videos: int) -> BreakdownTable:
    rows_of = {ALL: df.filter(pl.col(BY_COLUMN) == ALL)}
    mine = df.filter(pl.col(BY_COLUMN) == column)
    for level in level_order(mine[column].unique().to_list()):
        rows_of[level] = mine.filter(pl.col(column) == level)
    frames, small = [], []
    for level, rows in rows_of.items():
        if rows.is_empty():
            continue
        lb = leaderboard(rows.drop([BY_COLUMN, *[a for a in attributes if a in rows.columns]]), protocol)
        videos = rows[VIDEOS_COLUMN].max() if VIDEOS_COLUMN in rows.columns else None
        if videos is not None and videos < min_videos:
            small.append(f"{level} ({videos} videos)")
        cells = [{**{c: r[c] for c in lb.system_columns}, column: level,
                  **{m: _cell(r, m) for m in lb.metrics}, "n": r["n"],
                  "videos": "-" if videos is None else f"{videos}" + ("!" if videos < min_videos else "")}
                 for r in lb.table.iter_rows(named=True)]
        frames.append(pl.DataFrame(cells, infer_schema_length=None).with_columns(pl.col("n").cast(pl.Int64)))
    table = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
    warnings = [f"{protocol} by {column}: the intervals of {', '.join(small)} rest on fewer than {min_videos} "
                f"videos; read them as rough"] if small else []
    return BreakdownTable(protocol, column, table, warnings)


def _grid(df: pl.DataFrame) -> list[str]:
    return text_grid(df.columns, [["-" if x is None else str(x) for x in row] for row in df.iter_rows()])


def format_breakdowns(tables: list[BreakdownTable]) -> str:
    """Plain text: per protocol and attribute, the table then its warnings."""
    parts = []
    for t in tables:
        lines = [f"== {t.protocol} by {t.column} (95% CI, bootstrap over the level's videos) =="] + _grid(t.table)
        lines += [f"  warning: {w}" for w in t.warnings]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def breakdowns_html(tables: list[BreakdownTable]) -> str:
    """The report's breakdowns section body."""
    if not tables:
        return ("<p class='note'>No breakdowns in this run: set <code>[options] breakdowns = [\"task\", ...]</code> "
                "in the sweep file, or run <code>capeval report RUN --by COLUMN</code>.</p>")
    e = html.escape
    out = [f"<p class='note'>Metrics per level of an item attribute, each level with its own bootstrap over its "
           f"videos; levels marked ! rest on fewer than {MIN_VIDEOS} videos.</p>"]
    for t in tables:
        head = "".join(f"<th>{e(str(c))}</th>" for c in t.table.columns)
        body = "".join("<tr>" + "".join(f"<td>{e('-' if v is None else str(v))}</td>" for v in row) + "</tr>"
                       for row in t.table.iter_rows())
        out.append(f"<h3>{e(t.protocol)} by {e(t.column)}</h3><table class='breakdown'><thead><tr>{head}</tr>"
                   f"</thead><tbody>{body}</tbody></table>")
        out += [f"<div class='warn'>{e(w)}</div>" for w in t.warnings]
    return "\n".join(out)


def run_breakdowns(run: RunData, by, *, media_duration=None) -> tuple[pl.DataFrame, list[str]]:
    """(breakdown rows in the results table's shape, notes) for a run folder: per cell, its protocol's metrics on
    its verdicts, split by `by` over the items the run's sweep file names (without them: the verdicts' own columns,
    e.g. task), with the params and resamples its run record gives."""
    by = parse_by(by)
    if run.verdicts is None or run.verdicts.is_empty():
        raise ValueError(f"{run.path}: no verdicts to break down (--by needs the run's verdicts/)")
    config = (run.records[-1].get("config") or {}) if run.records else {}
    params_of = {p.get("label") or p.get("name"): p.get("params") or {} for p in config.get("protocols") or []}
    n_resamples = int((config.get("options") or {}).get("n_resamples") or 200)
    items = load_items(run)
    frames, notes, skipped, reasons = [], [], {name: 0 for name in by}, {}
    group = ["cell_key"] if "cell_key" in run.verdicts.columns else CELL_COLUMNS
    for _, part in run.verdicts.group_by(group, maintain_order=True):
        labels = {c: part[c][0] for c in CELL_COLUMNS if c in part.columns}
        protocol = lookup("protocol", part["protocol_name"][0])
        # the params that concern metrics, as the sweep passes them (JudgeProtocol.metric_params)
        params = protocol.metric_params(params_of.get(labels.get("protocol"), {}))
        verdicts = part.drop([c for c in ("dataset", "protocol_name", "cell_key") if c in part.columns]).with_columns(
            pl.lit(protocol.name).alias("protocol"))
        its = None
        if items is not None and "dataset" in items.columns:
            its = items.filter(pl.col("dataset") == labels.get("dataset")).drop("dataset")
            its = its if its.height else None
        captions = _cell_captions(run.captions, labels)

        def compute(v, items=None, captions=None, protocol=protocol, params=params):
            scored = v.drop([c for c in ("item_status", "retryable") if c in v.columns])
            return explain_nulls(protocol.compute_metrics(scored, items=items, captions=captions,
                                                          n_resamples=n_resamples, seed=0, **params),
                                 v, captions=captions)

        result = with_breakdowns(compute(verdicts, items=its, captions=captions), compute, verdicts, by, items=its,
                                 captions=captions, media_duration=media_duration, on_unknown="skip")
        notes += [f"{' '.join(str(v) for v in labels.values())}: {n}" for n in result.notes]
        for n in result.notes:  # "<name>: skipped: <why>" when this cell's items do not carry it
            name, _, why = n.partition(": skipped: ")
            if why and name in skipped:
                skipped[name] += 1
                reasons.setdefault(name, why)
        frame = result.frame.drop([c for c in CELL_COLUMNS if c in result.frame.columns])
        frames.append(frame.with_columns(pl.lit(v).alias(c) for c, v in labels.items()))
    nowhere = [n for n, count in skipped.items() if count == len(frames)]
    if nowhere:  # in no cell at all: a typo, or an attribute none of the run's items carry
        raise UnknownColumnError(reasons[nowhere[0]])
    out = pl.concat(frames, how="diagonal_relaxed")
    return out.select([c for c in CELL_COLUMNS if c in out.columns] + [c for c in out.columns
                                                                       if c not in CELL_COLUMNS]), notes


def _cell_captions(captions: pl.DataFrame | None, labels: dict) -> pl.DataFrame | None:
    if captions is None:
        return None
    for c in ("captioner", "prompt_id", "frame_spec"):
        if c in captions.columns and labels.get(c) is not None:
            captions = captions.filter(pl.col(c) == labels[c])
    return captions


def section_tables(run: RunData, computed: pl.DataFrame | None = None) -> list[BreakdownTable]:
    """The tables the report shows: the results' own breakdown rows (a sweep's [options] breakdowns), and the rows
    `capeval report --by` computed (`computed`) for attributes the results do not hold."""
    tables = breakdown_tables(run.results) if run.results.height and BY_COLUMN in run.results.columns else []
    if computed is not None and computed.height:
        have = {(t.protocol, t.column) for t in tables}
        tables += [t for t in breakdown_tables(computed) if (t.protocol, t.column) not in have]
    return tables
