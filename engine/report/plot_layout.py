"""How the report's plots are laid out, apart from what they draw (engine/report/plots.py):

* **facets by judge**: one chart per judge. Two judges' numbers on one line chart read as two more systems, and
  their scales need not agree (a judge's 60% is not another's).
* **small multiples**: past MAX_SERIES series a chart is a tangle of colours nobody can follow; the series are split
  into small panels instead, by the first system column whose values split them into groups of at most
  MAX_SERIES (e.g. one panel per captioner, its prompts as the series), else one panel per series.
* **verdict colours in the codes' order**: the verdict codes' colours follow the protocol's codes, so a stack
  reads the same in every chart: right green, wrong red, in between amber (the same name gets the same colour in
  every protocol); codes that carry no such name (a 1-5 score's SCORE_1..SCORE_5, a protocol's own codes) get a
  sequential red-to-green scale in code order; rows without a verdict are grey and come last.
"""

from __future__ import annotations

import polars as pl

from capeval.engine.report.ordering import sorted_values, system_sort_key

#: more series than this in one chart: small multiples instead
MAX_SERIES = 6
#: series colours (plotly's first colours, re-used per panel in the same order)
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22",
           "#7f7f7f"]
NO_VERDICT = "no verdict"
NO_VERDICT_COLOUR = "#9e9e9e"
#: verdict names that mean the same in every protocol, and their colour
_GOOD, _PARTIAL, _UNSURE, _BAD = "#2ca02c", "#98df8a", "#f2b447", "#d62728"
NAMED_COLOURS = {"CORRECT": _GOOD, "POSITIVE": _GOOD, "ENTAILMENT": _GOOD, "PARTIAL": _PARTIAL,
                 "NOT_MENTIONED": _UNSURE, "CANNOT_DETERMINE": _UNSURE, "MISS": _UNSURE, "NEUTRAL": _UNSURE,
                 "WRONG": _BAD, "INCORRECT": _BAD, "NEGATIVE": _BAD, "CONTRADICTION": _BAD}


def facets(frame: pl.DataFrame, column: str = "judge") -> list[tuple[str | None, pl.DataFrame]]:
    """(value, rows) per value of `column` in display order; [(None, frame)] when the frame has no such column."""
    if column not in frame.columns:
        return [(None, frame)]
    return [(v, frame.filter(pl.col(column).cast(pl.String) == v))
            for v in sorted_values(column, frame[column].cast(pl.String).to_list())]


def series_keys(frame: pl.DataFrame, columns: list[str]) -> list[tuple]:
    """The distinct values of `columns` (as text), ordered as systems are (frame specs by frame count)."""
    if not columns:
        return [()]
    rows = frame.select(pl.col(c).cast(pl.String) for c in columns).unique().rows()
    return sorted(rows, key=lambda r: system_sort_key(dict(zip(columns, r)), columns))


def series_groups(keys: list[tuple], columns: list[str], max_series: int = MAX_SERIES
                  ) -> list[tuple[str | None, list[tuple]]]:
    """Panels of series: [(None, keys)] when there are at most `max_series`; else small multiples, titled by what
    their series share ("captioner=qwen"), or one panel per series."""
    if len(keys) <= max_series:
        return [(None, keys)]
    for i, column in enumerate(columns):
        groups: dict[str, list[tuple]] = {}
        for k in keys:
            groups.setdefault(k[i], []).append(k)
        if len(groups) > 1 and max(len(g) for g in groups.values()) <= max_series:
            return [(f"{column}={value}", members) for value, members in groups.items()]
    return [(" / ".join(map(str, k)), [k]) for k in keys]


def series_name(key: tuple, columns: list[str], title: str | None) -> str:
    """A series' legend name: its values, leaving out the one its panel's title already says."""
    shared = title.split("=", 1)[0] if title and "=" in title else None
    parts = [str(v) for c, v in zip(columns, key) if c != shared]
    return " / ".join(parts) or " / ".join(map(str, key)) or "all"


def ordered_labels(codes: list[int], labels: dict[int, str]) -> list[str]:
    """The verdict labels of `codes` in code order (a code without a declared name shows as its number), then
    NO_VERDICT when a negative code (no verdict) is present."""
    valid = sorted({int(c) for c in codes if c is not None and c >= 0})
    out = [labels.get(c, str(c)) for c in valid]
    if any(c is None or c < 0 for c in codes):
        out.append(NO_VERDICT)
    return out


def verdict_colours(ordered: list[str]) -> dict[str, str]:
    """label -> colour for labels in code order: named colours when every label has one, else a sequential
    red-to-green scale in code order; NO_VERDICT grey."""
    from plotly.colors import sample_colorscale

    shown = [x for x in ordered if x != NO_VERDICT]
    if all(x.upper() in NAMED_COLOURS for x in shown):
        colours = {x: NAMED_COLOURS[x.upper()] for x in shown}
    else:
        steps = [i / (len(shown) - 1) for i in range(len(shown))] if len(shown) > 1 else [1.0]
        colours = dict(zip(shown, sample_colorscale("RdYlGn", steps)))
    colours[NO_VERDICT] = NO_VERDICT_COLOUR
    return colours
