"""`write_report(run_dir)`: ONE self-contained HTML file for a run folder (opens offline: plotly.js, CSS and the
per-sample browser's JavaScript are inlined; nothing is fetched).

Sections: run record, leaderboards (headline table with CIs, warnings, breakdown), the sections the run's protocols
add (`JudgeProtocol.report_sections`), plots (metric vs frames, per task bars, paired-difference forest plot, verdict
distributions, judge agreement when several judges or seeds ran), paired comparisons, the per-sample browser and the
failures table.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from pathlib import Path

import polars as pl

from capeval.engine.protocols.base import ReportSection
from capeval.engine.registry import lookup
from capeval.engine.report import plots
from capeval.engine.report.across import across_html
from capeval.engine.report.assets import CSS, JS
from capeval.engine.report.breakdowns import breakdowns_html, section_tables
from capeval.engine.report.compare import compare_run
from capeval.engine.report.cost import cost_html
from capeval.engine.report.leaderboard import Leaderboard, leaderboards
from capeval.engine.report.rundir import RunData, load_items, load_run
from capeval.engine.report.transcripts import verdict_labels as _verdict_labels, with_transcripts
from capeval.engine.report.validation import validation_html
from capeval.engine.store.segments import write_text_atomic

#: rows embedded in the per-sample browser; failures always, the rest in order up to this many
MAX_SAMPLES = 5000
_FAILED_STATUS = {2: "failed", 3: "error", 4: "missing"}
_STATUS = {0: "ok", 1: "repaired", **_FAILED_STATUS}


def _e(x) -> str:
    return html.escape("" if x is None else str(x))


def _num(v, digits=1) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _leaderboard_html(lb: Leaderboard) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in lb.system_columns + lb.metrics + ["n", "no verdict", "videos"])
    body = []
    for r in lb.table.iter_rows(named=True):
        cells = "".join(f"<td>{_e(r[c])}</td>" for c in lb.system_columns)
        for m in lb.metrics:
            star = "*" if r["note"] and m in r["note"] else ""
            if r[m] is None and r.get(f"{m}_reason"):  # a failure is never a number, nor a bare dash: say why
                cells += f"<td class='reason' style='color:#8a4b00'>{_e(r[f'{m}_reason'])}{star}</td>"
                continue
            ci = ("" if r[f"{m}_low"] is None else
                  f" <span class='ci'>[{_num(r[f'{m}_low'])}, {_num(r[f'{m}_high'])}]</span>")
            cells += f"<td class='num'>{_num(r[m])}{star}{ci}</td>"
        cells += "".join(f"<td class='num'>{_e(r[c])}</td>" for c in ("n", "n_no_verdict", "n_videos"))
        body.append(f"<tr>{cells}</tr>")
    out = [f"<h3>{_e(lb.protocol)}</h3>", f"<table class='leaderboard'><thead><tr>{head}</tr></thead>"
           f"<tbody>{''.join(body)}</tbody></table>"]
    if lb.definitions:  # what each number is, as the protocol declares it
        out.append("<dl class='metric-definitions'>" + "".join(
            f"<dt>{_e(m)}</dt><dd>{_e(definition)}</dd>" for m, definition in lb.definitions) + "</dl>")
    for r in lb.table.filter(pl.col("note").is_not_null()).iter_rows(named=True):
        out.append(f"<p class='note'>* {_e(' '.join(str(r[c]) for c in lb.system_columns))}: {_e(r['note'])}</p>")
    out += [f"<div class='warn'>{_e(w)}</div>" for w in lb.warnings]
    if lb.breakdown.height:
        out.append(f"<details><summary>by {_e(', '.join(lb.breakdown_columns))} ({lb.breakdown.height} rows)"
                   f"</summary>{_frame_html(lb.breakdown)}</details>")
    return "\n".join(out)


def _frame_html(df: pl.DataFrame, digits: int = 2, max_rows: int = 2000) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in df.columns)
    rows = []
    for r in df.head(max_rows).iter_rows():
        rows.append("<tr>" + "".join(
            f"<td class='num'>{_num(v, digits)}</td>" if isinstance(v, float) else f"<td>{_e(v)}</td>" for v in r)
            + "</tr>")
    more = f"<p class='note'>{df.height - max_rows} more rows not shown</p>" if df.height > max_rows else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"


def _comparison_html(comp: pl.DataFrame) -> str:
    if comp.is_empty():
        return "<p class='note'>No two systems of the same dataset, protocol and judge share videos.</p>"
    # the judge (and dataset) of every row: two judges' differences are not one number; diff is named a − b
    shown = comp.select("dataset", "protocol", "judge", "same", "a", "b", "metric", "a_value", "b_value",
                        pl.col("diff").alias("a − b"), "ci_low", "ci_high", "p_value", "p_holm", "n_videos",
                        "warning")
    if comp["dataset"].n_unique() == 1:
        shown = shown.drop("dataset")
    n = int(comp["p_value"].is_not_null().sum())
    return (_frame_html(shown, digits=3)
            + f"<p class='note'>Every difference is a − b: a is the system that sorts first (frame specs by frame "
              f"count, other values alphabetically), the same direction for every judge. Paired bootstrap over the "
              f"videos both systems were judged on (the same resampled videos for a and b). p_holm applies Holm's "
              f"correction over all {n} differences in this table; p-values resolve down to 1/resamples.</p>")


def _sample_rows(run: RunData, max_samples: int) -> tuple[dict, pl.DataFrame]:
    v = run.verdicts
    labels = {}
    for name in v["protocol_name"].unique().to_list():
        for code, label in _verdict_labels(name).items():
            labels[(name, code)] = label
    names = pl.DataFrame([{"protocol_name": p, "_code": c, "_name": n} for (p, c), n in labels.items()],
                         schema={"protocol_name": pl.String, "_code": pl.Int64, "_name": pl.String})
    v = v.with_columns(pl.col("verdict").cast(pl.Int64).alias("_code")).join(
        names, on=["protocol_name", "_code"], how="left")  # a join, not a Python call per row
    v = v.with_columns(
        pl.when(pl.col("_code") < 0).then(pl.lit("no verdict")).otherwise(
            pl.col("_name").fill_null(pl.col("_code").cast(pl.String))).alias("verdict_label"),
        pl.col("parse_status").cast(pl.Int64).replace_strict(_STATUS, default="?", return_dtype=pl.String)
        .alias("status")).drop("_code", "_name")
    if run.captions is not None:
        caps = run.captions.select("captioner", "prompt_id", "frame_spec", "video_id",
                                   pl.col("text").alias("caption"), pl.col("error").alias("caption_error")).unique(
            subset=["captioner", "prompt_id", "frame_spec", "video_id"], keep="first")
        v = v.join(caps, on=["captioner", "prompt_id", "frame_spec", "video_id"], how="left")
    else:
        v = v.with_columns(pl.lit(None, dtype=pl.String).alias("caption"),
                           pl.lit(None, dtype=pl.String).alias("caption_error"))
    items = load_items(run)
    if items is not None and {"task", "item_id", "annotation"} <= set(items.columns):
        shown_items = items.select(
            "dataset", "task", "item_id", pl.col("annotation").alias("question"),
            pl.col("options").cast(pl.List(pl.String)).list.join(" | ").alias("options")
            if "options" in items.columns else pl.lit(None, dtype=pl.String).alias("options"),
            pl.col("answer") if "answer" in items.columns else pl.lit(None, dtype=pl.String).alias("answer"),
        ).unique(subset=["dataset", "task", "item_id"], keep="first")
        v = v.join(shown_items, on=["dataset", "task", "item_id"], how="left")
    prompts = {}
    for pid in v["prompt_id"].unique().to_list():
        try:
            from capeval.engine.prompts_library import get_prompt

            prompts[pid] = get_prompt(pid).text
        except Exception:  # a prompt id the library does not know (an external pack): show none
            prompts[pid] = None
    v = v.with_columns(pl.col("prompt_id").replace_strict(prompts, default=None, return_dtype=pl.String)
                       .alias("caption_prompt"))
    failures = v.filter(pl.col("parse_status") >= 2)
    ordered = pl.concat([failures, v.filter(pl.col("parse_status") < 2)], how="vertical")
    # what the judge was sent (and the caption it judged, for captions read from files too): its transcripts
    embedded = with_transcripts(run.transcripts_at, ordered.head(max_samples))
    shown = ["protocol", "captioner", "prompt_id", "frame_spec", "judge", "task", "item_id", "video_id", "step",
             "verdict_label", "status"]
    details = ["question", "options", "answer", "caption", "caption_prompt", "judge_system", "judge_prompt",
               "raw_output", "attempts", "detail", "error", "caption_error"]
    cols = [c for c in dict.fromkeys(shown + details) if c in embedded.columns]
    rows, lookups = _shared_texts(embedded.select(cols), ("judge_system", "caption_prompt"))
    data = {"columns": cols, "rows": rows, "lookups": lookups,
            "filters": [c for c in ("protocol", "captioner", "prompt_id", "frame_spec", "judge", "task",
                                    "verdict_label", "status") if c in cols],
            "shown": [c for c in shown if c in cols], "details": [c for c in details if c in cols],
            "left_out": max(0, ordered.height - max_samples)}
    return data, failures


def _shared_texts(df: pl.DataFrame, columns) -> tuple[list, dict]:
    """Rows with the long texts most rows share (a system prompt, a captioning prompt) replaced by an index into
    `lookups[column]`, so the page holds each such text once (assets.JS resolves them)."""
    lookups = {}
    for c in columns:
        if c in df.columns:
            values = df[c].unique(maintain_order=True).drop_nulls().to_list()
            lookups[c] = values
            df = df.with_columns(pl.col(c).replace_strict(values, list(range(len(values))), default=None,
                                                          return_dtype=pl.Int64))
    return df.rows(), lookups


def _failures_html(failures: pl.DataFrame, captions: pl.DataFrame | None) -> str:
    parts = []
    if failures.height:
        cols = [c for c in ("protocol", "captioner", "prompt_id", "frame_spec", "judge", "task", "item_id", "status",
                            "attempt", "error", "raw_output") if c in failures.columns]
        parts.append(f"<p>{failures.height} verdict rows without a verdict (counted in n_no_verdict):</p>"
                     + _frame_html(failures.select(cols), max_rows=500))
    if captions is not None and "error" in captions.columns:
        bad = captions.filter(pl.col("error").is_not_null())
        if bad.height:
            parts.append(f"<p>{bad.height} captions failed:</p>" + _frame_html(
                bad.select("captioner", "prompt_id", "frame_spec", "video_id", "error"), max_rows=500))
    return "\n".join(parts) or "<p class='note'>No failed judgments and no failed captions.</p>"


def _record_html(run: RunData) -> str:
    if not run.records:
        return "<p class='note'>No run.json in this folder (a run before run records existed).</p>"
    last = run.records[-1]
    versions = ", ".join(f"{k} {v}" for k, v in (last.get("versions") or {}).items() if v)
    rows = [("runs recorded", len(run.records)), ("last run", f"{last.get('command')} finished "
            f"{last.get('finished_at')} in {last.get('wall_s')} s"),
            ("capeval revision", (last.get("capeval") or {}).get("git_revision")), ("versions", versions),
            ("components", json.dumps(last.get("components"))), ("modes", json.dumps(last.get("modes"))),
            ("prompt packs", json.dumps(last.get("pack_digests"))),
            ("counts", json.dumps(last.get("counts_by_status"))), ("throughput", json.dumps(last.get("throughput")))]
    if last.get("decide"):  # an adaptive run: its decisions are in decide.json, the summary here
        rows.append(("adaptive decisions ([options] decide)", json.dumps(last["decide"])))
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def protocol_sections(run: RunData) -> list[ReportSection]:
    """The sections every protocol the run judged with adds (`JudgeProtocol.report_sections`), protocol by protocol
    in the run's order; a protocol that is not registered here adds none."""
    if run.verdicts is not None and "protocol_name" in run.verdicts.columns:
        names = list(dict.fromkeys(run.verdicts["protocol_name"].to_list()))
    else:
        names = run.protocols
    sections = []
    for name in names:
        try:
            protocol = lookup("protocol", name)
        except KeyError:
            continue
        sections += protocol.report_sections(run.path)
    return sections


def _section_html(section: ReportSection) -> str:
    return f'<section id="{_e(section.anchor)}"><h2>{_e(section.title)}</h2>{section.html}</section>'


def script_json(value) -> str:
    """`value` as JSON that is safe inside a <script> element: captions and judge replies are untrusted text, and
    `</script` would end the element while `<!--` followed by `<script` switches the HTML parser into a state where
    the closing tag no longer closes it (the sample browser came up empty). Every `<`, `>` and `&` is written as a
    JSON escape (`\\u003c`, ...) and non-ASCII as escapes too (U+2028/U+2029 included); JSON.parse reads it back
    unchanged."""
    text = json.dumps(value, default=str, ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def build_report(run: RunData, *, n_resamples: int = 2000, max_samples: int = MAX_SAMPLES,
                 breakdowns: pl.DataFrame | None = None) -> str:
    """The page's HTML text."""
    from plotly.offline import get_plotlyjs

    n_videos = run.n_videos()
    lbs = leaderboards(run.results, n_videos=n_videos) if run.results.height else []
    comp = compare_run(run.verdicts, n_resamples=n_resamples) if run.verdicts is not None else pl.DataFrame()
    figures = []
    for i, lb in enumerate(lbs):
        figures += [plots.frames_plot(lb, f"fig-frames-{i}"), plots.task_bars(lb, run.results, f"fig-tasks-{i}")]
    if comp.height:
        figures.append(plots.forest_plot(comp, "fig-forest"))
    agreement = pl.DataFrame()
    if run.verdicts is not None:
        for i, p in enumerate(dict.fromkeys(run.verdicts["protocol"].to_list())):
            name = run.verdicts.filter(pl.col("protocol") == p)["protocol_name"][0]
            figures.append(plots.verdict_distribution(run.verdicts, p, _verdict_labels(name), f"fig-dist-{i}"))
        agreement = plots.agreement_table(run.verdicts)
        figures.append(plots.agreement_plot(agreement, "fig-agreement"))
    samples, failures = _sample_rows(run, max_samples) if run.verdicts is not None else (
        {"columns": [], "rows": [], "filters": [], "shown": [], "details": [], "left_out": 0}, pl.DataFrame())
    data_json = script_json(samples)
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    head_cols = "".join(f"<th>{_e(c)}</th>" for c in samples["shown"])
    agreement_html = (_frame_html(agreement, 3) if agreement.height else
                      "<p class='note'>One judge and one seed per item: no agreement to show.</p>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>capeval report: {_e(run.path.name)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<header><h1>capeval report: {_e(run.path.name)}</h1><p>{_e(run.path.resolve())} · generated {now}</p></header>
<nav><a href="#leaderboards">Leaderboards</a><a href="#breakdowns">Breakdowns</a><a href="#plots">Plots</a><a href="#comparisons">Comparisons</a>
<a href="#samples">Samples</a><a href="#failures">Failures</a><a href="#cost">Cost</a><a href="#validation">Judge validation</a>
<a href="#run">Run record</a></nav>
<main>
<section id="leaderboards"><h2>Leaderboards</h2>
<p class="note">Headline metrics with 95% percentile intervals from a bootstrap that resamples videos.</p>
{''.join(_leaderboard_html(lb) for lb in lbs) or "<p class='note'>No results table in this folder.</p>"}
</section>
{''.join(_section_html(section) for section in protocol_sections(run))}
<section id="breakdowns"><h2>Breakdowns</h2>{breakdowns_html(section_tables(run, breakdowns))}</section>
<section id="plots"><h2>Plots</h2>{''.join(f for f in figures if f)}</section>
<section id="comparisons"><h2>Paired comparisons</h2>{_comparison_html(comp)}</section>
{across_html(run, n_resamples=n_resamples)}
<section id="agreement"><h2>Judge agreement</h2>{agreement_html}</section>
<section id="samples"><h2>Samples</h2>
<p class="note">Every judged row: filter, then click a row for its caption, captioning prompt, the judge's prompt,
its reply, every attempt and the parse.</p>
<div class="filters" id="sample-filters"></div>
<div class="pager"><button id="samples-prev">&larr; previous</button><button id="samples-next">next &rarr;</button>
<span id="samples-count"></span></div>
<table id="samples-table"><thead><tr>{head_cols}</tr></thead><tbody></tbody></table>
</section>
<section id="failures"><h2>Failures</h2>{_failures_html(failures, run.captions)}</section>
<section id="cost"><h2>Cost</h2>{cost_html(run.records, run.results)}</section>
<section id="validation"><h2>Judge validation</h2>{validation_html(run.records)}</section>
<section id="run"><h2>Run record</h2>{_record_html(run)}</section>
</main>
<script type="application/json" id="samples-data">{data_json}</script>
<script type="text/javascript">{JS}</script>
</body></html>
"""


def write_report(run_dir, out=None, **options) -> Path:
    """Write the report of `run_dir` to `out` (default `<run_dir>/report.html`) atomically; returns the path."""
    run = load_run(run_dir)
    path = Path(out) if out else run.path / "report.html"
    return write_text_atomic(build_report(run, **options), path, what="the report")
