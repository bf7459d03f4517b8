"""Protocols (or judges) held against each other, as text, JSON and the report's section: rank agreement of the
systems between raters and each rater's length sensitivity, computed by engine/metrics/across.py (its docstring
and docs/report.md say what every number is).

The report shows the section only for a run where two protocols (same dataset and judge) or two judges (same
dataset and protocol) scored at least one same system; `capeval compare RUN --across protocols|judges` prints it
on demand.
"""

from __future__ import annotations

import html

import polars as pl

from capeval.engine.metrics.across import ACROSS, SYSTEM, AcrossResult, across_run, rater_pairs
from capeval.engine.report.ordering import system_sort_key
from capeval.engine.report.rundir import RunData

#: what a reader must know to read the numbers, said under the tables and in the JSON
READING = {
    "rank_agreement": "Kendall tau_b (and Spearman rho) between two raters' headline values of the systems both "
                      "scored, each system over the videos both raters judged (n_videos; n_videos_a / n_videos_b: "
                      "the videos each judged); interval: percentile bootstrap resampling the videos both judged, "
                      "the same draws for both raters",
    "length": "x = log2(caption words); slope_item: metric points per doubling of length within a system (system "
              "fixed effects), partial_r_item: correlation of metric and x given the system, per caption (one "
              "system's verdicts of one video); slope_system / r_system: across systems, system value against "
              "its captions' mean x",
    "length_controlled": "value - slope_item * (mean x of the system's captions - log2(reference_words)): the "
                         "metric at the reference length on the rater's fitted line (AlpacaEval-style length "
                         "control, linear in log length); words: the geometric mean length of the system's "
                         "captions; a controlled score can leave the metric's range when it extrapolates",
}


def applicable(run: RunData) -> list[str]:
    """The `--across` kinds this run has something for (two raters over a shared system)."""
    if run.verdicts is None:
        return []
    return [a for a in ACROSS if rater_pairs(run.verdicts, a)]


def run_modes(results: pl.DataFrame) -> dict[str, str]:
    """protocol label -> the metric mode the run used (its results' `mode` column)."""
    if not results.height or not {"protocol", "mode"} <= set(results.columns):
        return {}
    return dict(results.select("protocol", "mode").drop_nulls().unique(subset=["protocol"], keep="first").rows())


def across_for_run(run: RunData, across: str, **options) -> AcrossResult:
    """across_run on the run's verdicts and captions, in the run's metric modes unless `modes` is given."""
    if run.verdicts is None:
        raise FileNotFoundError(f"{run.path}/verdicts holds no verdict segments: nothing to hold against each other")
    options.setdefault("modes", run_modes(run.results))
    return across_run(run.verdicts, run.captions, across=across, **options)


def _controlled_shown(result: AcrossResult) -> pl.DataFrame:
    """Each rater's first (headline) metric only, systems in display order (frame specs by frame count)."""
    c = result.controlled
    if c.is_empty():
        return c
    first = c.group_by("dataset", "protocol", "judge", maintain_order=True).agg(pl.col("metric").first())
    c = c.join(first, on=["dataset", "protocol", "judge", "metric"], how="semi")
    order = sorted(range(c.height), key=lambda i: (c["dataset"][i], c["protocol"][i], c["judge"][i],
                                                   system_sort_key(c.row(i, named=True), SYSTEM)))
    return c[order]


def across_json(result: AcrossResult, n_resamples: int) -> dict:
    return {"across": result.across, "rank_agreement": result.agreement.to_dicts(), "length": result.length.to_dicts(),
            "length_controlled": result.controlled.to_dicts(), "reference_words": result.reference_words,
            "n_resamples": n_resamples, "reading": READING, "notes": result.notes}


def _n(v, digits=2, sign=True) -> str:
    return "-" if v is None else f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def _ci(r: dict, name: str, digits=2) -> str:
    return f"{_n(r[name], digits)} [{_n(r[f'{name}_low'], digits)}, {_n(r[f'{name}_high'], digits)}]"


def format_across(result: AcrossResult) -> str:
    """Plain text: rank agreement, length sensitivity, length-controlled headline scores, then how to read them."""
    lines = [f"== rank agreement across {result.across}"]
    if result.agreement.is_empty():
        lines.append(f"   no two {result.across} scored the same system")
    for r in result.agreement.iter_rows(named=True):
        lines.append(f"   {r['dataset']}, {r['held']}: {r['a']} ({r['metric_a']}) vs {r['b']} ({r['metric_b']}): "
                     f"tau_b = {_ci(r, 'tau_b')}  rho = {_ci(r, 'spearman')}  systems = {r['n_systems']}, "
                     f"videos both judged = {r['n_videos']} (of {r['n_videos_a']} and {r['n_videos_b']})"
                     + (f"  warning: {r['warning']}" if r["warning"] else ""))
    lines.append("== length sensitivity (x = log2 words; slopes in metric points per doubling of caption length)")
    if result.length.is_empty():
        lines.append("   no caption texts: nothing to measure length against")
    for r in result.length.iter_rows(named=True):
        lines.append(f"   {r['dataset']} {r['protocol']} judge={r['judge']} {r['metric']}: item slope "
                     f"{_ci(r, 'slope_item')} partial r {_ci(r, 'partial_r_item')}; system slope "
                     f"{_ci(r, 'slope_system')} r {_ci(r, 'r_system')}; captions = {r['n_captions']}, systems = "
                     f"{r['n_systems']}" + (f"  warning: {r['warning']}" if r["warning"] else ""))
    shown = _controlled_shown(result)
    if shown.height:
        lines.append(f"== length-controlled scores at {result.reference_words:g} words (headline metric; --json has "
                     f"every metric)")
        for r in shown.iter_rows(named=True):
            system = " | ".join(str(r[c]) for c in SYSTEM)
            lines.append(f"   {r['dataset']} {r['protocol']} judge={r['judge']} {r['metric']} {system}: value "
                         f"{_n(r['value'], sign=False)} at {_n(r['words'], 1, False)} words -> controlled "
                         f"{_ci(r, 'controlled')}")
    lines += [f"{k}: {v}." for k, v in READING.items()]
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _table(df: pl.DataFrame, columns: list[str], digits: int = 2) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = []
    for r in df.iter_rows(named=True):
        cells = []
        for c in columns:
            v = r[c]
            if f"{c}_low" in r:  # a value with its interval
                low, high = _n(r[f"{c}_low"], digits, False), _n(r[f"{c}_high"], digits, False)
                cells.append(f"<td class='num'>{_n(v, digits, False)} <span class='ci'>[{low}, {high}]</span></td>")
            elif isinstance(v, float):
                cells.append(f"<td class='num'>{_n(v, digits, False)}</td>")
            else:
                cells.append(f"<td>{_e(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def across_html(run: RunData, *, n_resamples: int = 2000, seed: int = 0) -> str:
    """The report's section (with its <section> element), or "" when no two protocols or judges share a system."""
    kinds = applicable(run)
    if not kinds:
        return ""
    results = [across_for_run(run, k, n_resamples=n_resamples, seed=seed) for k in kinds]
    parts = ["<section id='across'><h2>Protocols and judges held against each other</h2>"]
    for res in results:
        parts.append(f"<h3>Rank agreement across {_e(res.across)}</h3>")
        parts.append(_table(res.agreement, ["dataset", "held", "a", "metric_a", "b", "metric_b", "tau_b", "spearman",
                                            "n_systems", "n_videos", "n_videos_a", "n_videos_b", "warning"]))
    first = results[0]  # length sensitivity is per rater: the same whichever `across` asked for it
    parts.append("<h3>Length sensitivity</h3>")
    if first.length.is_empty():
        parts.append("<p class='note'>No caption texts in this run: nothing to measure length against.</p>")
    else:
        parts.append(_table(first.length, ["dataset", "protocol", "judge", "metric", "slope_item", "partial_r_item",
                                           "slope_system", "r_system", "n_captions", "n_systems", "warning"]))
        parts.append(f"<h3>Length-controlled scores at {first.reference_words:g} words</h3>")
        parts.append(_table(_controlled_shown(first), ["dataset", "protocol", "judge", *SYSTEM, "metric", "value",
                                                       "words", "controlled"]))
    reading = " ".join(f"<b>{_e(k.replace('_', ' '))}</b>: {_e(v)}." for k, v in READING.items())
    parts.append(f"<p class='note'>{reading}"
                 f" {n_resamples} resamples. Read tau_b over a handful of systems as a description: its interval is "
                 f"wide and takes few values.</p>")
    parts += [f"<div class='warn'>{_e(n)}</div>" for n in dict.fromkeys(n for r in results for n in r.notes)]
    parts.append("</section>")
    return "\n".join(parts)
