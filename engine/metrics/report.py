"""A readable plain-text table of a long-format metrics frame (the metrics themselves: engine.metrics.core)."""

from __future__ import annotations

import numpy as np
import polars as pl

VALUE_COLUMNS = ["metric", "value", "ci_low", "ci_high", "n", "n_no_verdict"]


def format_table(frame: pl.DataFrame, digits: int = 2) -> str:
    """A plain-text table: group columns, metric, value [ci_low, ci_high], n, n_no_verdict."""
    groups = [c for c in frame.columns if c not in VALUE_COLUMNS]

    def num(x) -> str:
        return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"

    header = groups + ["metric", "value", "95% CI", "n", "no verdict"]
    body = [[str(r[c]) for c in groups] + [r["metric"], num(r["value"]), f"[{num(r['ci_low'])}, {num(r['ci_high'])}]",
                                           str(r["n"]), str(r["n_no_verdict"])] for r in frame.iter_rows(named=True)]
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in body]
    return "\n".join(lines)
