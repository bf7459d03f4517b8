"""Plotly figures of the HTML report, each returned as an HTML fragment (a div + its script, no plotly.js: the
page inlines the offline bundle once). Every figure is built from the same tables the text report prints.

* metric vs frame count per captioner x prompt, with CI bars (one panel per headline metric);
* per-task / per-type bars of the first headline metric, with CI bars;
* the forest plot of paired differences (one line per pair and metric, CI bars, zero line);
* verdict distributions per system (share of each verdict code, rows without a verdict included);
* judge agreement (percent agreement and Cohen's kappa) between judges or judge seeds on the same items.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from engine.report.leaderboard import Leaderboard

_FRAMES = re.compile(r"^(?:uniform|frames)[:=](\d+)$")


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


def frames_plot(lb: Leaderboard, div_id: str) -> str | None:
    """Headline metrics against the frame spec (numeric frame count when every spec is uniform:N)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    t = lb.table
    if "frame_spec" not in t.columns or t["frame_spec"].n_unique() < 2:
        return None
    counts = [_FRAMES.match(str(s)) for s in t["frame_spec"].to_list()]
    numeric = all(counts)
    t = t.with_columns(pl.Series("_x", [int(m.group(1)) for m in counts] if numeric else t["frame_spec"].to_list()))
    series_cols = [c for c in lb.system_columns if c != "frame_spec"]
    fig = make_subplots(rows=1, cols=len(lb.metrics), subplot_titles=lb.metrics, horizontal_spacing=0.06)
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"]
    for k, (key, g) in enumerate(t.sort("_x").group_by(series_cols, maintain_order=True)):
        name = " / ".join(str(x) for x in key)
        for j, m in enumerate(lb.metrics):
            fig.add_trace(go.Scatter(x=g["_x"].to_list(), y=g[m].to_list(), error_y=_err(g[m], g[f"{m}_low"],
                                     g[f"{m}_high"]), mode="lines+markers", name=name, legendgroup=name,
                                     showlegend=j == 0, line=dict(color=palette[k % len(palette)])), 1, j + 1)
    fig.update_xaxes(title_text="frames" if numeric else "frame spec", type="linear" if numeric else "category")
    fig.update_layout(title=f"{lb.protocol}: metrics vs frames (95% CI)", height=400)
    return _html(fig, div_id)


def task_bars(lb: Leaderboard, results: pl.DataFrame, div_id: str) -> str | None:
    """The first headline metric per breakdown value (task / question type / dimension), one bar per system."""
    import plotly.graph_objects as go

    if not lb.breakdown_columns:
        return None
    col = lb.breakdown_columns[-1]  # the finest level (question_type under family)
    metric = lb.metrics[0]
    df = results.filter(pl.col("metric") == metric)
    if "protocol" in df.columns:
        df = df.filter(pl.col("protocol") == lb.protocol)
    df = df.filter(~pl.col(col).is_in(["all", "avg", "overall", "-"]) & pl.col(col).is_not_null())
    for other in lb.breakdown_columns:
        if other != col:
            df = df.filter(pl.col(other).is_not_null())
    if df.is_empty():
        return None
    fig = go.Figure()
    for key, g in df.group_by(lb.system_columns, maintain_order=True):
        fig.add_trace(go.Bar(x=g[col].to_list(), y=g["value"].to_list(), name=" / ".join(map(str, key)),
                             error_y=_err(g["value"], g["ci_low"], g["ci_high"])))
    fig.update_layout(barmode="group", title=f"{lb.protocol}: {metric} by {col} (95% CI)", yaxis_title=metric,
                      height=420)
    return _html(fig, div_id)


def forest_plot(comparison: pl.DataFrame, div_id: str) -> str | None:
    """Paired differences a - b with their CIs; a line per (pair, metric), zero marked."""
    import plotly.graph_objects as go

    if comparison.is_empty() or comparison["diff"].is_null().all():
        return None
    c = comparison.filter(pl.col("diff").is_not_null())
    labels = [f"{r['protocol']} {r['metric']}: {r['a']} − {r['b']} ({r['same']})" for r in c.iter_rows(named=True)]
    sig = [(p is not None and p < 0.05) for p in c["p_holm"].to_list()]
    fig = go.Figure(go.Scatter(
        x=c["diff"].to_list(), y=labels, mode="markers",
        marker=dict(color=["#d62728" if s else "#1f77b4" for s in sig], size=9),
        error_x=_err(c["diff"], c["ci_low"], c["ci_high"]),
        text=[f"p={p:.3g}, Holm p={h:.3g}, videos={n}" for p, h, n in
              zip(c["p_value"].fill_null(np.nan), c["p_holm"].fill_null(np.nan), c["n_videos"])],
        hovertemplate="%{y}<br>a−b = %{x:.2f}<br>%{text}<extra></extra>"))
    fig.add_vline(x=0, line_dash="dash", line_color="grey")
    fig.update_layout(title="Paired differences a − b (95% paired bootstrap CI; red: Holm p < 0.05)",
                      xaxis_title="difference (metric units)", height=max(300, 28 * len(labels) + 120),
                      yaxis=dict(autorange="reversed"), margin=dict(l=420))
    return _html(fig, div_id)


def verdict_distribution(verdicts: pl.DataFrame, protocol: str, labels: dict[int, str], div_id: str) -> str | None:
    """Share of each verdict code per system (stacked bars); rows without a verdict shown as their own code."""
    import plotly.graph_objects as go

    v = verdicts.filter(pl.col("protocol") == protocol)
    if v.is_empty():
        return None
    v = v.with_columns(pl.concat_str([pl.col("captioner"), pl.col("prompt_id"), pl.col("frame_spec"),
                                      pl.col("judge")], separator=" / ").alias("_system"),
                       pl.col("verdict").cast(pl.Int64).replace_strict(labels, default=None,
                                                                       return_dtype=pl.String)
                       .fill_null(pl.col("verdict").cast(pl.String)).alias("_label"))
    v = v.with_columns(pl.when(pl.col("verdict") < 0).then(pl.lit("no verdict")).otherwise(pl.col("_label"))
                       .alias("_label"))
    share = v.group_by("_system", "_label").len().with_columns(
        (100 * pl.col("len") / pl.col("len").sum().over("_system")).alias("share")).sort("_system", "_label")
    fig = go.Figure()
    for label, g in share.group_by("_label", maintain_order=True):
        fig.add_trace(go.Bar(y=g["_system"].to_list(), x=g["share"].to_list(), name=str(label[0]),
                             orientation="h", customdata=g["len"].to_list(), marker_color=_code_colour(label[0]),
                             hovertemplate="%{y}: %{x:.1f}% (%{customdata} rows)<extra>" + str(label[0])
                                           + "</extra>"))
    n_sys = share["_system"].n_unique()
    fig.update_layout(barmode="stack", title=f"{protocol}: verdict distribution per system (% of rows)",
                      xaxis_title="% of verdict rows", height=max(260, 40 * n_sys + 140), margin=dict(l=320))
    return _html(fig, div_id)


def _code_colour(label: str) -> str | None:
    """Green for right, red for wrong, grey for no verdict, so the stacks read the same in every protocol."""
    name = str(label).upper()
    if name == "NO VERDICT":
        return "#9e9e9e"
    if name in ("CORRECT", "POSITIVE", "ENTAILMENT"):
        return "#2ca02c"
    if name in ("WRONG", "NEGATIVE", "INCORRECT", "CONTRADICTION"):
        return "#d62728"
    return None


def agreement_table(verdicts: pl.DataFrame) -> pl.DataFrame:
    """Percent agreement and Cohen's kappa between judges (or judge seeds) on the same judged rows."""
    from kernels.agreement import cohen_kappa

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
