"""A readable plain-text table of a long-format metrics frame (the metrics themselves: capeval.engine.metrics.core).

`format_table` puts the protocol's leaderboard (capeval.engine.report.leaderboard: the shape every scoring command prints)
above the long table when the protocol can be told from the metric names (a headline metric of exactly one
registered protocol marks it: `metric_markers`)."""

from __future__ import annotations

import functools

import numpy as np
import polars as pl

from capeval.engine.registry import lookup, names
from capeval.engine.report.leaderboard import format_leaderboard, leaderboards
from capeval.engine.schemas import METRIC_VALUE_NAMES

VALUE_COLUMNS = METRIC_VALUE_NAMES


def metric_markers() -> dict[str, str]:
    """headline metric name -> protocol, for the names in exactly one registered protocol's `headline` (such a name
    in a metrics table tells which protocol wrote it). Computed once per set of registered protocols."""
    return _markers(tuple(names("protocol")))


@functools.lru_cache(maxsize=8)
def _markers(protocols: tuple[str, ...]) -> dict[str, str]:
    owners: dict[str, set[str]] = {}
    for name in protocols:
        for metric in lookup("protocol", name).headline:
            owners.setdefault(metric, set()).add(name)
    return {m: next(iter(ps)) for m, ps in owners.items() if len(ps) == 1}


def guess_protocol(frame: pl.DataFrame) -> str | None:
    if "protocol" in frame.columns and frame["protocol"].n_unique() == 1:
        return str(frame["protocol"][0])
    names = set(frame["metric"].unique().to_list()) if "metric" in frame.columns else set(frame.columns)
    found = {p for m, p in metric_markers().items() if m in names}
    return found.pop() if len(found) == 1 else None


def format_table(frame: pl.DataFrame, digits: int = 2, protocol: str | None = None,
                 leaderboard: bool = True, *, n_videos: pl.DataFrame | None = None, every_row: bool = True) -> str:
    """The protocol's leaderboard (when known), then every row (group columns, metric, value [ci_low, ci_high], n,
    n_no_verdict) unless `every_row` is False (a command that writes the rows to a file says where instead).
    `n_videos`: videos behind each system (capeval.engine.report.leaderboard.videos_per_system) for the videos column."""
    rows = format_rows(frame, digits)
    protocol = protocol or guess_protocol(frame)
    if not leaderboard or protocol is None or frame.is_empty():
        return rows
    try:
        boards = leaderboards(frame, protocol=protocol, n_videos=n_videos)
    except (ValueError, KeyError, pl.exceptions.PolarsError):  # an unusual table: the rows alone still say it all
        return rows
    text = "\n\n".join(format_leaderboard(lb) for lb in boards)
    return text + "\n\n-- every metric row --\n" + rows if every_row else text


def format_rows(frame: pl.DataFrame, digits: int = 2) -> str:
    """A plain-text table: group columns, metric, value [ci_low, ci_high], n, n_no_verdict, and the reason of each
    null value (last, unpadded: it names the first error) when there is one."""
    groups = [c for c in frame.columns if c not in VALUE_COLUMNS]
    reasons = "reason" in frame.columns and frame["reason"].is_not_null().any()

    def num(x) -> str:
        return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"

    header = groups + ["metric", "value", "95% CI", "n", "no verdict"] + (["reason"] if reasons else [])
    body = [[str(r[c]) for c in groups] + [r["metric"], num(r["value"]), f"[{num(r['ci_low'])}, {num(r['ci_high'])}]",
                                           str(r["n"]), str(r["n_no_verdict"])]
            + ([r["reason"] if r["value"] is None and r["reason"] else ""] if reasons else [])
            for r in frame.iter_rows(named=True)]
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
    if reasons:  # the last column runs on: no padding to the longest reason
        widths[-1] = len("reason")
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in body]
    return "\n".join(lines)
