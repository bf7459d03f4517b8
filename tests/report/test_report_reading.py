"""Results people read right (issue 16, item 5): `capeval compare` keeps one direction (a − b, a sorting first,
frame specs by count) for every judge and names the judge in its table and forest plot; an unknown name in --a/--b
lists the valid ones; the report's plots order frame specs by frame count, draw one chart per judge, split more
than six series into small multiples, colour verdicts in the codes' order and draw no empty chart.

Plots are read from the report's HTML: the plotly JSON each `Plotly.newPlot(...)` call carries (no browser)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from _verdicts import random_codes, verdict_rows
from capeval.engine.registry import lookup
from capeval.engine.report.compare import compare_run
from capeval.engine.report.html import build_report
from capeval.engine.report.leaderboard import leaderboards
from capeval.engine.report.rundir import RunData
from capeval.engine.report import plots


def _system(captioner="m1", prompt="p", frames="uniform:8") -> dict:
    return {"captioner": captioner, "prompt_id": prompt, "frame_spec": frames}


def _verdicts(protocol: str, systems: list[dict], judges: list[str], n_codes: int, *, dead=(), n_videos=25,
              seed=0) -> pl.DataFrame:
    """Rows of every system under every judge; a judge in `dead` returned nothing (every row without verdict).
    Each judge's systems come in a different order, as cells finish in a different order per judge."""
    frames = []
    for j, judge in enumerate(judges):
        order = systems if j % 2 == 0 else systems[::-1]
        for s, system in enumerate(order):
            codes = ([[-1] * 3] * n_videos if judge in dead else
                     random_codes(n_videos, 3, [1 / n_codes] * n_codes, seed=seed + 31 * j + s))
            frames.append(verdict_rows(system, codes, protocol=protocol, judge=judge)
                          .with_columns(pl.lit("score").alias("step")))
    return pl.concat(frames)


def _run(verdicts: pl.DataFrame, tmp_path: Path) -> RunData:
    """A run folder's tables: the protocol's own metrics per judge, labelled as the sweep labels them."""
    metrics = []
    # two question types, so that the protocols with a breakdown have one to plot
    items = verdicts.select("task", "item_id").unique().with_columns(
        pl.when(pl.col("item_id").str.ends_with("q0")).then(pl.lit("action")).otherwise(pl.lit("object"))
        .alias("category"))
    for (judge, protocol), v in verdicts.group_by("judge", "protocol", maintain_order=True):
        m = lookup("protocol", protocol).compute_metrics(v.drop("dataset", "protocol_name", "judge"), items=items,
                                                         n_resamples=20)
        metrics.append(m.with_columns(pl.lit("d").alias("dataset"), pl.lit(protocol).alias("protocol"),
                                      pl.lit(judge).alias("judge")))
    return RunData(tmp_path, pl.concat(metrics, how="diagonal_relaxed"), verdicts, None, [])


def figures(html: str) -> dict[str, tuple[list[dict], dict]]:
    """div id -> (traces, layout) of every plotly figure on the page."""
    out, dec = {}, json.JSONDecoder()

    def value(i):
        while html[i].isspace() or html[i] == ",":
            i += 1
        return dec.raw_decode(html, i)

    for m in re.finditer(r"Plotly\.newPlot\(", html):
        div, i = value(m.end())
        traces, i = value(i)
        layout, _ = value(i)
        out[div] = (traces, layout)
    return out


def _title(layout: dict) -> str:
    return (layout.get("title") or {}).get("text", "")


def _has_data(trace: dict) -> bool:
    return any(v is not None for v in (trace.get("y") if trace.get("orientation") != "h" else trace.get("x")) or [])


# -- compare ----------------------------------------------------------------------------------------------------------
def test_compare_direction_is_a_minus_b_the_same_for_every_judge(tmp_path):
    systems = [_system(frames="uniform:16"), _system(frames="uniform:4"), _system(captioner="m2", frames="uniform:4")]
    v = _verdicts("capquiz", systems, ["judge-one", "judge-two"], 3)
    out = compare_run(v, n_resamples=200)
    assert set(out["judge"]) == {"judge-one", "judge-two"}
    for r in out.iter_rows(named=True):
        assert r["diff"] == pytest.approx(r["a_value"] - r["b_value"], abs=1e-9)
    pairs = {j: sorted(zip(g["differs"], g["a"], g["b"], g["metric"])) for (j,), g in out.group_by("judge")}
    assert pairs["judge-one"] == pairs["judge-two"]  # rows came in opposite orders; the directions agree
    frames = out.filter(pl.col("differs") == "frame_spec")
    assert set(zip(frames["a"], frames["b"])) == {("uniform:4", "uniform:16")}  # by count, not as text
    assert set(zip(*[out.filter(pl.col("differs") == "captioner")[c] for c in ("a", "b")])) == {("m1", "m2")}

    page = build_report(_run(v, tmp_path), n_resamples=100)
    table = page[page.index('<section id="comparisons">'):page.index('<section id="agreement">')]
    assert "<th>judge</th>" in table and "<th>a − b</th>" in table
    assert "<td>judge-one</td>" in table and "<td>judge-two</td>" in table
    forest = {div: f for div, f in figures(page).items() if div.startswith("fig-forest")}
    assert sorted(_title(layout).rsplit("judge ", 1)[1] for _, layout in forest.values()) == ["judge-one",
                                                                                               "judge-two"]
    for traces, layout in forest.values():
        assert "a − b" in _title(layout) and layout["xaxis"]["title"]["text"].startswith("a − b")
        assert all(" − " in label for t in traces for label in t["y"])


def test_unknown_selector_names_the_valid_values(tmp_path, capsys):
    from capeval.engine.cli import main

    path = tmp_path / "verdicts.parquet"
    _verdicts("capquiz", [_system(), _system(captioner="m2")], ["j"], 3).drop("dataset", "protocol_name") \
        .write_parquet(path)
    assert main(["compare", str(path), "--a", "captioner=nobody"]) == 2
    assert "no system has captioner=nobody; captioners: m1, m2" in capsys.readouterr().err
    assert main(["compare", str(path), "--a", "m1", "--b", "gpt5"]) == 2
    err = capsys.readouterr().err
    assert "--b: no system has a captioner, prompt id or frame spec 'gpt5'" in err and "captioners: m1, m2" in err
    assert main(["compare", str(path), "--a", "model=m1"]) == 2
    assert "unknown key 'model'; keys: captioner, prompt_id, frame_spec" in capsys.readouterr().err
    assert main(["compare", str(path), "--a", "captioner=m1", "--b", "captioner=m2", "--resamples", "50"]) == 0


# -- plots ------------------------------------------------------------------------------------------------------------
def _leaderboard(verdicts: pl.DataFrame, tmp_path: Path):
    run = _run(verdicts, tmp_path)
    return leaderboards(run.results)[0], run


def test_frame_specs_are_ordered_by_frame_count(tmp_path):
    specs = ["uniform:16", "uniform:4", "uniform:8"]
    lb, _ = _leaderboard(_verdicts("vcinspector", [_system(frames=f) for f in specs], ["j"], 5), tmp_path)
    (traces, layout), = figures(plots.frames_plot(lb, "f")).values()
    assert traces[0]["x"] == [4, 8, 16] and layout["xaxis"]["type"] == "linear"
    # a spec without a count: categories in count order, the rest after in text order
    specs += ["fps:1", "file"]
    lb, _ = _leaderboard(_verdicts("vcinspector", [_system(frames=f) for f in specs], ["j"], 5), tmp_path)
    (traces, layout), = figures(plots.frames_plot(lb, "f")).values()
    expected = ["uniform:4", "uniform:8", "uniform:16", "file", "fps:1"]
    assert layout["xaxis"]["categoryarray"] == expected and traces[0]["x"] == expected


def test_one_chart_per_judge(tmp_path):
    systems = [_system(prompt=p, frames=f) for p in ("p1", "p2") for f in ("uniform:4", "uniform:8")]
    page = build_report(_run(_verdicts("capquiz", systems, ["judge-one", "judge-two"], 3), tmp_path),
                        n_resamples=50)
    figs = figures(page)
    for kind in ("fig-frames-0", "fig-tasks-0", "fig-dist-0"):
        charts = {div: f for div, f in figs.items() if div.startswith(kind + "-")}
        assert len(charts) == 2, (kind, list(figs))
        assert sorted(_title(layout).rsplit(", judge ", 1)[1] for _, layout in charts.values()) == [
            "judge-one", "judge-two"]
        for traces, _ in charts.values():
            assert not any("judge" in (t.get("name") or "") for t in traces)  # judges are charts, not series


def test_small_multiples_past_six_series(tmp_path):
    systems = [_system(captioner=c, prompt=f"p{k}", frames=f) for c in ("m1", "m2") for k in range(6)
               for f in ("uniform:4", "uniform:8")]
    lb, run = _leaderboard(_verdicts("capquiz", systems, ["j"], 3, n_videos=6), tmp_path)
    panels = {}
    for kind, html in (("frames", plots.frames_plot(lb, "f")), ("tasks", plots.task_bars(lb, run.results, "t"))):
        (traces, layout), = figures(html).values()
        per_axes: dict[tuple, set] = {}
        for t in traces:
            per_axes.setdefault((t.get("xaxis", "x"), t.get("yaxis", "y")), set()).add(t["name"])
        assert len(per_axes) >= 2 and max(len(names) for names in per_axes.values()) <= 6, (kind, per_axes)
        panels[kind] = ({a["text"].split(" · ")[0] for a in layout["annotations"]},
                        {n for names in per_axes.values() for n in names})
    # 12 captioner x prompt lines: a panel per captioner, its six prompts the series (one legend entry each)
    assert panels["frames"] == ({"captioner=m1", "captioner=m2"}, {f"p{k}" for k in range(6)})
    # 24 bars per task (captioner x prompt x frames): a panel per prompt, four bars in each
    assert panels["tasks"][0] == {f"prompt_id=p{k}" for k in range(6)} and len(panels["tasks"][1]) == 4


def test_verdict_colours_follow_the_codes_order(tmp_path):
    v = _verdicts("vcinspector", [_system()], ["j"], 5)
    v = v.with_columns(pl.when(pl.col("item_id").str.ends_with("q2") & (pl.col("video_id") == "v000"))
                       .then(-1).otherwise(pl.col("verdict")).cast(pl.Int8).alias("verdict"))
    html = plots.verdict_distribution(v, "vcinspector", lookup("protocol", "vcinspector").verdict_labels(), "d")
    (traces, _), = figures(html).values()
    assert [t["name"] for t in traces] == ["SCORE_1", "SCORE_2", "SCORE_3", "SCORE_4", "SCORE_5", "no verdict"]
    rgb = [tuple(int(x) for x in re.findall(r"\d+", t["marker"]["color"])) for t in traces[:5]]
    reds, greens = [c[0] for c in rgb], [c[1] for c in rgb]
    assert reds[0] > greens[0] and greens[-1] > reds[-1] and len(set(rgb)) == 5  # red to green, in code order
    assert traces[-1]["marker"]["color"] == "#9e9e9e"
    # a name means one colour in every protocol: CORRECT in VidCapBench (code 3) and CapQuiz (code 1)
    colour = {}
    for protocol, n in (("vidcapbench", 4), ("capquiz", 3)):
        html = plots.verdict_distribution(_verdicts(protocol, [_system()], ["j"], n), protocol,
                                          lookup("protocol", protocol).verdict_labels(), "d")
        (traces, _), = figures(html).values()
        names = [t["name"] for t in traces]
        codes = lookup("protocol", protocol).verdict_labels()
        assert names == [codes[k] for k in sorted(codes)]
        colour[protocol] = {t["name"]: t["marker"]["color"] for t in traces}
    assert colour["vidcapbench"]["CORRECT"] == colour["capquiz"]["CORRECT"]
    assert colour["vidcapbench"]["INCORRECT"] == colour["capquiz"]["WRONG"]


def test_a_vcinspector_run_draws_no_empty_chart(tmp_path):
    systems = [_system(frames=f) for f in ("uniform:4", "uniform:8", "uniform:16")]
    for judges, dead in ((["judge-down"], {"judge-down"}), (["judge-up", "judge-down"], {"judge-down"})):
        page = build_report(_run(_verdicts("vcinspector", systems, judges, 5, dead=dead), tmp_path), n_resamples=50)
        figs = figures(page)
        for div, (traces, layout) in figs.items():
            assert traces and all(_has_data(t) for t in traces), (div, _title(layout))
        frames = [_title(layout) for div, (_, layout) in figs.items() if div.startswith("fig-frames")]
        assert frames == ([] if judges == ["judge-down"] else
                          ["vcinspector: metrics vs frames (95% CI), judge judge-up"])
