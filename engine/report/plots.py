"""Plotly figures of the HTML report, each returned as an HTML fragment (a div + its script, no plotly.js: the
page inlines the offline bundle once). Every figure is built from the same tables the text report prints.

* metric vs frame count per captioner x prompt, with CI bars (one panel per headline metric);
* per-task / per-type bars of the first headline metric, with CI bars;
* the forest plot of paired differences a − b (one line per pair and metric, CI bars, zero line);
* verdict distributions per system (share of each verdict code, rows without a verdict included);
* judge agreement (percent agreement and Cohen's kappa) between judges or judge seeds on the same items.

Layout rules (engine/report/plot_layout.py): one chart per judge, small multiples past MAX_SERIES series, frame
specs ordered by frame count (engine/report/ordering.py), verdict colours in the codes' order. A series with no
value is left out, and a chart with nothing to draw is not made (a judge whose cells all failed, a protocol without
a breakdown): an empty chart reads as "zero", which is not what happened.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from capeval.engine.report.leaderboard import Leaderboard
from capeval.engine.report.ordering import frame_count, sorted_values
from capeval.engine.report.plot_layout import (NO_VERDICT, PALETTE, facets, ordered_labels, series_groups, series_keys,
                                       series_name, verdict_colours)
from capeval.kernels.agreement import cohen_kappa


def _html(fig, div_id: str) -> str:
    import plotly.io as pio

    fig.update_layout(template="plotly_white", margin=dict(l=60, r=20, t=50, b=60), height=fig.layout.height or 380)
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def _err(values, low, high):
    v = np.array([np.nan if x is None else x for x in values], dtype=float)
    lo = np.array([np.nan if x is None else x for x in low], dtype=float)
    hi = np.array([np.nan if x is None else x for x in high], dtype=float)
    return dict(type="data", symmetric=False, array=np.nan_to_num(hi - v), arrayminus=np.nan_to_num(v - lo))


def _joined(parts: list[str]) -> str | None:
    return "".join(parts) or None


def _judge_title(title: str, judge: str | None) -> str:
    return f"{title}, judge {judge}" if judge is not None else title


def _rows_of(frame: pl.DataFrame, columns: list[str], key: tuple) -> pl.DataFrame:
    for c, v in zip(columns, key):
        frame = frame.filter(pl.col(c).cast(pl.String) == v)
    return frame


def _has_values(values: pl.Series) -> bool:
    """Whether a column holds anything to draw (null: no verdicts; NaN: a metric undefined there)."""
    return bool(values.cast(pl.Float64).fill_nan(None).is_not_null().any())


def _colour(name: str, names: dict[str, str]) -> str:
    """The same series name gets the same colour in every panel of a chart."""
    return names.setdefault(name, PALETTE[len(names) % len(PALETTE)])


def frames_plot(lb: Leaderboard, div_id: str) -> str | None:
    """Headline metrics against the frame spec, one chart per judge (numeric x when every spec has its own frame
    count, else the specs as categories ordered by frame count)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t = lb.table
    if "frame_spec" not in t.columns or t["frame_spec"].n_unique() < 2:
        return None
    specs = sorted_values("frame_spec", t["frame_spec"].to_list())
    counts = [frame_count(s) for s in specs]
    numeric = None not in counts and len(set(counts)) == len(counts)
    position = dict(zip(specs, counts if numeric else specs))
    t = t.with_columns(pl.col("frame_spec").replace_strict(position, return_dtype=pl.Int64 if numeric else pl.String)
                       .alias("_x"), pl.col("frame_spec").replace_strict({s: i for i, s in enumerate(specs)})
                       .alias("_order"))
    series_cols = [c for c in lb.system_columns if c not in ("frame_spec", "judge")]
    parts = []
    for k, (judge, tj) in enumerate(facets(t) if "judge" in lb.system_columns else [(None, t)]):
        keys = [key for key in series_keys(tj, series_cols)
                if any(_has_values(_rows_of(tj, series_cols, key)[m]) for m in lb.metrics)]
        if not keys:
            continue  # every value of this judge is missing: no chart
        groups = series_groups(keys, series_cols)
        titles = [f"{g} · {m}" if g else m for g, _ in groups for m in lb.metrics]
        fig = make_subplots(rows=len(groups), cols=len(lb.metrics), subplot_titles=titles, horizontal_spacing=0.06,
                            vertical_spacing=min(0.12, 0.6 / len(groups)))
        names: dict[str, str] = {}
        for r, (title, members) in enumerate(groups, start=1):
            for key in members:
                g = _rows_of(tj, series_cols, key).sort("_order")
                name = series_name(key, series_cols, title) if series_cols else lb.protocol
                colour = _colour(name, names)
                for j, m in enumerate(lb.metrics, start=1):
                    if not _has_values(g[m]):
                        continue
                    fig.add_trace(go.Scatter(x=g["_x"].to_list(), y=g[m].to_list(), mode="lines+markers",
                                             error_y=_err(g[m], g[f"{m}_low"], g[f"{m}_high"]), name=name,
                                             legendgroup=name, line=dict(color=colour)), r, j)
        _dedupe_legend(fig)
        fig.update_xaxes(title_text="frames" if numeric else "frame spec", type="linear" if numeric else "category",
                         **({} if numeric else dict(categoryorder="array", categoryarray=specs)))
        fig.update_layout(title=_judge_title(f"{lb.protocol}: metrics vs frames (95% CI)", judge),
                          height=max(400, 300 * len(groups)))
        parts.append(_html(fig, f"{div_id}-j{k}"))
    return _joined(parts)


def _dedupe_legend(fig) -> None:
    """One legend entry per series name (a name recurs in every metric panel and every small multiple)."""
    seen = set()
    for trace in fig.data:
        trace.showlegend = trace.name not in seen
        seen.add(trace.name)


def task_bars(lb: Leaderboard, results: pl.DataFrame, div_id: str) -> str | None:
    """The first headline metric per breakdown value (task / question type / dimension), one bar per system; one
    chart per judge, small multiples past MAX_SERIES systems."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    if not lb.breakdown_columns:
        return None
    metric = lb.metrics[0]
    df = results.filter(pl.col("metric") == metric)
    added = {"by", *df["by"].drop_nulls().to_list()} if "by" in df.columns else set()
    if added:  # the unsplit run's rows only: `--by` levels have their own tables (report/breakdowns.py)
        df = df.filter(pl.col("by").is_null() | (pl.col("by") == "all"))
    shown = [c for c in lb.breakdown_columns if c not in added]
    if not shown:
        return None
    col = shown[-1]  # the finest level (question_type under family)
    if "protocol" in df.columns:
        df = df.filter(pl.col("protocol") == lb.protocol)
    df = df.filter(~pl.col(col).is_in(["all", "avg", "overall", "-"]) & pl.col(col).is_not_null())
    for other in lb.breakdown_columns:
        if other != col:
            df = df.filter(pl.col(other).is_not_null())
    df = df.filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
    if df.is_empty():
        return None
    categories = list(dict.fromkeys(df[col].cast(pl.String).to_list()))
    series_cols = [c for c in lb.system_columns if c != "judge" and c in df.columns]
    parts = []
    for k, (judge, dj) in enumerate(facets(df) if "judge" in lb.system_columns else [(None, df)]):
        if dj.is_empty():
            continue
        groups = series_groups(series_keys(dj, series_cols), series_cols)
        fig = make_subplots(rows=len(groups), cols=1, subplot_titles=[g or "" for g, _ in groups],
                            vertical_spacing=min(0.12, 0.6 / len(groups)))
        names: dict[str, str] = {}
        for r, (title, members) in enumerate(groups, start=1):
            for key in members:
                g = _rows_of(dj, series_cols, key)
                if g.is_empty():
                    continue
                name = series_name(key, series_cols, title)
                fig.add_trace(go.Bar(x=g[col].cast(pl.String).to_list(), y=g["value"].to_list(), name=name,
                                     legendgroup=name, marker_color=_colour(name, names),
                                     error_y=_err(g["value"], g["ci_low"], g["ci_high"])), r, 1)
        _dedupe_legend(fig)
        fig.update_xaxes(categoryorder="array", categoryarray=categories)
        fig.update_yaxes(title_text=metric)
        fig.update_layout(barmode="group", title=_judge_title(f"{lb.protocol}: {metric} by {col} (95% CI)", judge),
                          height=max(420, 300 * len(groups)))
        parts.append(_html(fig, f"{div_id}-j{k}"))
    return _joined(parts)


def forest_plot(comparison: pl.DataFrame, div_id: str) -> str | None:
    """Paired differences a − b with their CIs, one chart per judge; a line per (pair, metric), zero marked."""
    import plotly.graph_objects as go

    if comparison.is_empty() or comparison["diff"].is_null().all():
        return None
    several_datasets = comparison["dataset"].n_unique() > 1
    parts = []
    for k, (judge, c) in enumerate(facets(comparison.filter(pl.col("diff").is_not_null()))):
        if c.is_empty():
            continue
        labels = [(f"[{r['dataset']}] " if several_datasets else "") + f"{r['protocol']} {r['metric']}: "
                  f"{r['a']} − {r['b']} ({r['same']})" for r in c.iter_rows(named=True)]
        sig = [(p is not None and p < 0.05) for p in c["p_holm"].to_list()]
        fig = go.Figure(go.Scatter(
            x=c["diff"].to_list(), y=labels, mode="markers", name=f"judge {judge}",
            marker=dict(color=["#d62728" if s else "#1f77b4" for s in sig], size=9),
            error_x=_err(c["diff"], c["ci_low"], c["ci_high"]),
            text=[f"judge {judge}, a={a_} ({va:.3g}), b={b_} ({vb:.3g}), p={p:.3g}, Holm p={h:.3g}, videos={n}"
                  for a_, b_, va, vb, p, h, n in zip(c["a"], c["b"], c["a_value"].fill_null(np.nan),
                                                     c["b_value"].fill_null(np.nan), c["p_value"].fill_null(np.nan),
                                                     c["p_holm"].fill_null(np.nan), c["n_videos"])],
            hovertemplate="%{y}<br>a − b = %{x:.2f}<br>%{text}<extra></extra>"))
        fig.add_vline(x=0, line_dash="dash", line_color="grey")
        fig.update_layout(title=_judge_title("Paired differences a − b (95% paired bootstrap CI; red: Holm p < 0.05)",
                                             judge),
                          xaxis_title="a − b (metric units)", height=max(300, 28 * len(labels) + 120),
                          yaxis=dict(autorange="reversed"), margin=dict(l=420))
        parts.append(_html(fig, f"{div_id}-j{k}"))
    return _joined(parts)


def verdict_distribution(verdicts: pl.DataFrame, protocol: str, labels: dict[int, str], div_id: str) -> str | None:
    """Share of each verdict code per system (stacked bars, in code order), one chart per judge; rows without a
    verdict shown as their own grey part."""
    import plotly.graph_objects as go

    v = verdicts.filter(pl.col("protocol") == protocol)
    if v.is_empty():
        return None
    order = ordered_labels(v["verdict"].to_list(), labels)
    colours = verdict_colours(order)
    system_cols = ["captioner", "prompt_id", "frame_spec"]
    v = v.with_columns(pl.when(pl.col("verdict") < 0).then(pl.lit(NO_VERDICT))
                       .otherwise(pl.col("verdict").cast(pl.Int64).replace_strict(labels, default=None,
                                                                                  return_dtype=pl.String)
                                  .fill_null(pl.col("verdict").cast(pl.String))).alias("_label"))
    parts = []
    for k, (judge, vj) in enumerate(facets(v)):
        if vj.is_empty():
            continue
        systems = [" / ".join(key) for key in series_keys(vj, system_cols)]
        vj = vj.with_columns(pl.concat_str([pl.col(c).cast(pl.String) for c in system_cols], separator=" / ")
                             .alias("_system"))
        share = vj.group_by("_system", "_label").len().with_columns(
            (100 * pl.col("len") / pl.col("len").sum().over("_system")).alias("share"))
        fig = go.Figure()
        for label in order:
            g = share.filter(pl.col("_label") == label)
            if g.is_empty():
                continue
            g = g.sort(pl.col("_system").replace_strict({s: i for i, s in enumerate(systems)}, default=len(systems)))
            fig.add_trace(go.Bar(y=g["_system"].to_list(), x=g["share"].to_list(), name=label, orientation="h",
                                 customdata=g["len"].to_list(), marker_color=colours[label],
                                 hovertemplate="%{y}: %{x:.1f}% (%{customdata} rows)<extra>" + label + "</extra>"))
        fig.update_layout(barmode="stack", legend=dict(traceorder="normal"),
                          title=_judge_title(f"{protocol}: verdict distribution per system (% of rows)", judge),
                          xaxis_title="% of verdict rows", height=max(260, 40 * len(systems) + 140),
                          yaxis=dict(categoryorder="array", categoryarray=systems, autorange="reversed"),
                          margin=dict(l=320))
        parts.append(_html(fig, f"{div_id}-j{k}"))
    return _joined(parts)


def agreement_table(verdicts: pl.DataFrame) -> pl.DataFrame:
    """Percent agreement and Cohen's kappa between judges (or judge seeds) on the same judged rows."""
    v = verdicts.filter(pl.col("verdict") >= 0)
    item = [c for c in ("protocol", "captioner", "prompt_id", "frame_spec", "task", "item_id", "sub_index", "step")
            if c in v.columns]
    raters = v.with_columns(pl.concat_str([pl.col("judge"), pl.lit(" seed "),
                                           pl.col("seed").cast(pl.String).fill_null("-")]).alias("_rater"))
    names = sorted(raters["_rater"].unique().to_list())
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ja = raters.filter(pl.col("_rater") == a).select(item + [pl.col("verdict").alias("_a")])
            jb = raters.filter(pl.col("_rater") == b).select(item + [pl.col("verdict").alias("_b")])
            both = ja.unique(subset=item).join(jb.unique(subset=item), on=item, how="inner", nulls_equal=True)
            if both.height < 2:
                continue
            for proto, g in both.group_by("protocol"):
                x, y = g["_a"].to_numpy().astype(np.int64), g["_b"].to_numpy().astype(np.int64)
                k = int(max(x.max(), y.max())) + 1
                rows.append({"protocol": proto[0], "rater_a": a, "rater_b": b, "n_items": g.height,
                             "agreement_pct": float(100 * (x == y).mean()),
                             "cohen_kappa": float(cohen_kappa(x, y, k))})
    return pl.DataFrame(rows, schema={"protocol": pl.String, "rater_a": pl.String, "rater_b": pl.String,
                                      "n_items": pl.Int64, "agreement_pct": pl.Float64, "cohen_kappa": pl.Float64})


def agreement_plot(table: pl.DataFrame, div_id: str) -> str | None:
    import plotly.graph_objects as go

    if table.is_empty():
        return None
    labels = [f"{r['protocol']}: {r['rater_a']} vs {r['rater_b']}" for r in table.iter_rows(named=True)]
    fig = go.Figure([go.Bar(x=labels, y=table["agreement_pct"].to_list(), name="agreement %"),
                     go.Bar(x=labels, y=(100 * table["cohen_kappa"].fill_nan(None)).to_list(),
                            name="Cohen's κ × 100")])
    fig.update_layout(barmode="group", title="Judge agreement on the same items", height=380)
    return _html(fig, div_id)
