"""The report's cost section: what the run's results cost, per judge and captioner (run.json's `cost`, written by
engine/sweep/usage.py) and per cell (the results table's cost columns), told apart into what the last run paid and
what it reused from the caches. Unknown prices show as "unknown", never as 0."""

from __future__ import annotations

import html

import polars as pl

#: the results table's cost columns (engine/sweep/usage.COST_COLUMNS), in the order shown
CELL_COST_COLUMNS = ["judge_requests", "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
                     "reasoning_tokens", "judge_cost_usd", "caption_prompt_tokens", "caption_completion_tokens",
                     "caption_cost_usd", "cost_usd", "cost_usd_cached"]
_CELL = ["dataset", "captioner", "prompt_id", "frame_spec", "protocol", "judge"]


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _usd(v) -> str:
    return "unknown" if v is None else f"${v:,.4f}"


def _int(v) -> str:
    return "–" if v is None else f"{int(v):,}"


def cost_html(records: list[dict], results: pl.DataFrame) -> str:
    """The section's body; says so when the run recorded no cost (a run before cost accounting)."""
    cost = (records[-1].get("cost") if records else None) or {}
    if not cost:
        return "<p class='note'>No cost recorded for this run (run.json has no cost section).</p>"
    if "error" in cost:
        return f"<div class='warn'>{_e(cost['error'])}</div>"
    parts = [f"<p><b>total {_usd(cost.get('total_usd'))}</b>: paid in the last run {_usd(cost.get('paid_in_run_usd'))}"
             f", reused from caches {_usd(cost.get('reused_usd'))} (prices: USD per {_e(cost.get('prices_per'))})</p>"]
    rows = []
    prices = cost.get("prices") or {}
    for kind, section, count in (("judge", "judges", "requests"), ("captioner", "captioners", "captions")):
        for label, u in (cost.get(section) or {}).items():
            p = (prices.get(section) or {}).get(label)
            price = ("none set" if p is None else
                     f"in {p['input']} · cached {p['cached_input']} · out {p['output']} ({p.get('source', '')})")
            paid, reused = u.get("paid_in_run") or {}, u.get("reused") or {}
            rows.append([kind, label, _int(u.get(count)), _int(u.get("prompt_tokens")),
                         _int(u.get("cached_prompt_tokens")), _int(u.get("completion_tokens")),
                         _int(u.get("reasoning_tokens")), _usd(u.get("cost_usd")), _usd(paid.get("cost_usd")),
                         _usd(reused.get("cost_usd")), price])
    head = ["", "name", "requests / captions", "prompt tokens", "cached prompt", "completion", "reasoning", "cost",
            "paid in last run", "reused", "prices"]
    parts.append(_table(head, rows))
    parts += [f"<p class='note'>{_e(n)}</p>" for n in cost.get("notes") or []]
    cells = _cell_rows(results)
    if cells is not None and cells.height:
        head = [c for c in cells.columns]
        body = [[_cell_value(c, v, r) for c, v in r.items()] for r in cells.iter_rows(named=True)]
        parts.append("<details><summary>per cell (" + str(cells.height) + " cells)</summary>"
                     + _table(head, body) + "<p class='note'>A caption cell's captions are shared by its protocols "
                     "and judges: each of those cells shows their cost, the totals above count them once.</p>"
                     "</details>")
    return "\n".join(parts)


def _cell_value(column: str, value, row: dict) -> str:
    if column == "caption_cost_usd" and row.get("caption_prompt_tokens") is None:
        return "–"  # captions read from a file: capeval made none
    if "cost_usd" in column:
        return _usd(value)
    return _int(value) if column in CELL_COST_COLUMNS else value


def _cell_rows(results: pl.DataFrame) -> pl.DataFrame | None:
    if results is None or not results.height or "cost_usd" not in results.columns:
        return None
    cols = [c for c in _CELL if c in results.columns]
    have = [c for c in CELL_COST_COLUMNS if c in results.columns]
    return results.select(cols + have).unique(subset=cols, keep="first", maintain_order=True)


def _table(head: list[str], rows: list[list]) -> str:
    h = "".join(f"<th>{_e(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"
