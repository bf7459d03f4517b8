"""The report of a real sweep (generated videos, local captioner and judge on real local Ray): `capeval compare`
shows paired differences, `capeval report` writes one self-contained HTML file, and a real headless Chromium loads
it with no console errors, draws the plots (the screenshot is not blank) and filters the per-sample browser."""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl
import pytest

from _browser import Browser, chromium_path
from _sweeps import sweep_toml
from capeval.engine.cli import main as cli_main
from capeval.engine.report.rundir import load_run
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep


SWEEP = sweep_toml("report-test", n_videos=4, judges=[{"name": "local", "seeds": [0, 1]}])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, ray_local):
    sweep = tmp_path_factory.mktemp("sweepfile") / "report_test.toml"
    sweep.write_text(SWEEP)
    out = tmp_path_factory.mktemp("run")
    run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None)
    return out


def test_compare_cli_shows_paired_differences(run_dir, capsys):
    assert cli_main(["compare", str(run_dir), "--json", "--resamples", "300"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["comparisons"]
    # 4 systems (2 prompts x 2 frame specs): 4 one-factor pairs x 3 metrics
    assert len(rows) == 12 and {r["differs"] for r in rows} == {"prompt_id", "frame_spec"}
    assert all(r["n_videos"] == 4 and "< 20" in r["warning"] for r in rows)
    results = pl.read_parquet(run_dir / "results.parquet").filter(
        (pl.col("family") == "all") & (pl.col("question_type") == "all"))
    for r in rows:
        if r["diff"] is None:
            continue
        same = dict(kv.split("=") for kv in r["same"].split(" | "))
        key = "prompt_id" if r["differs"] == "prompt_id" else "frame_spec"
        other = "frame_spec" if key == "prompt_id" else "prompt_id"

        def value(x):
            sel = results.filter((pl.col(key) == x) & (pl.col(other) == same[other]) & (pl.col("metric") == r["metric"]))
            return sel["value"][0]

        assert r["diff"] == pytest.approx(value(r["a"]) - value(r["b"]))
        assert r["ci_low"] <= r["diff"] + 1e-9 <= r["ci_high"] + 2e-9 or r["ci_low"] == r["ci_high"]
    assert cli_main(["compare", str(run_dir), "--a", "prompt_id=brief", "--b", "prompt_id=capquiz_standard",
                     "--resamples", "200"]) == 0
    text = capsys.readouterr().out
    assert text.count("== capquiz") == 2 and "Holm" in text


def test_report_in_a_real_browser(run_dir, tmp_path, capsys):
    assert cli_main(["report", str(run_dir), "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert "capquiz leaderboard" in printed
    path = run_dir / "report.html"
    assert f"report: {path.resolve()}" in printed
    page = path.read_text()
    # self-contained: no script or stylesheet fetched from anywhere
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=", page)
    if chromium_path() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    pytest.importorskip("websockets.sync.client", reason="the DevTools driver needs the websockets package")
    verdicts = load_run(run_dir).verdicts
    browser = Browser()
    try:
        browser.load(path.resolve().as_uri())
        assert browser.errors() == []
        assert browser.evaluate("document.querySelectorAll('.js-plotly-plot .main-svg').length") >= 4
        assert browser.evaluate("window.capevalReport.matchedCount()") == verdicts.height
        # two judge seeds judged the same items: the agreement section has a row and its plot
        assert browser.evaluate("document.querySelectorAll('#agreement table tbody tr').length") == 1
        assert browser.evaluate("document.getElementById('fig-agreement') !== null")
        assert browser.evaluate("window.capevalReport.visibleCount()") == min(50, verdicts.height)
        # filter: one captioning prompt and one verdict
        wrong = verdicts.filter((pl.col("prompt_id") == "brief") & (pl.col("verdict") == 2)).height
        browser.evaluate("""(() => { for (const [id, v] of [['filter-prompt_id', 'brief'],
                                                         ['filter-verdict_label', 'WRONG']]) {
            const s = document.getElementById(id); s.value = v; s.dispatchEvent(new Event('change')); } })()""")
        assert browser.evaluate("window.capevalReport.matchedCount()") == wrong
        shown = browser.evaluate("""Array.from(document.querySelectorAll('#samples-table tr.row'))
                                    .map(tr => Array.from(tr.cells).map(c => c.textContent))""")
        assert len(shown) == min(50, wrong) and all("brief" in r and "WRONG" in r for r in shown)
        if wrong:  # a click opens the row's caption and raw output
            browser.evaluate("document.querySelector('#samples-table tr.row').click()")
            detail = browser.evaluate("document.querySelector('#samples-table tr.detail').textContent")
            assert "caption" in detail and "raw_output" in detail
            assert "question" in detail and "answer" in detail  # items reloaded from the recorded sweep file
        shot = browser.screenshot(tmp_path / "report.png")
        browser.evaluate("document.getElementById('plots').scrollIntoView()")
        plots_shot = browser.screenshot(tmp_path / "plots.png")
        assert browser.errors() == []
    finally:
        browser.close()
    from PIL import Image

    for png in (shot, plots_shot):
        pixels = np.asarray(Image.open(png).convert("RGB"), dtype=np.int16)
        assert pixels.shape[0] > 500 and pixels.std() > 20  # not a blank page
        # more than a handful of colours: tables, text and plot lines drawn
        assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50


def test_run_data_for_the_report(run_dir):
    run = load_run(run_dir)
    assert run.verdicts is not None and set(run.verdicts["seed"]) == {0, 1}
    assert run.n_videos()["n_videos"].to_list() == [4] * 4
    # the sweep wrote its run record: what ran, with which versions, and how it went
    assert len(run.records) == 1
    rec = run.records[0]
    assert rec["command"] == "sweep" and rec["counts_by_status"]["cells"]["run"] == 4
    assert rec["counts_by_status"]["verdicts"]["ok"] == run.verdicts.height
    assert rec["versions"]["ray"] and rec["sweep_file"].endswith("report_test.toml")
    assert rec["components"]["judges"] and rec["modes"] == {"capquiz": "strict"}
