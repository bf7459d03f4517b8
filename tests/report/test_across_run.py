"""`capeval compare RUN --across protocols|judges` and the report's section on a real sweep: CapQuiz and VC-Inspector
judging the same generated videos' captions (local captioner, local judge, real local Ray), so two protocols score
the same four systems."""

from __future__ import annotations

import json
import statistics

import polars as pl
import pytest

from _sweeps import write_sweep
from _verdicts import random_codes, verdict_rows
from capeval.engine.cli import main as cli_main
from capeval.engine.report.html import write_report
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, ray_local):
    sweep = write_sweep(tmp_path_factory.mktemp("sweepfile"), "across", n_videos=4,
                        protocols=("capquiz", "vcinspector"))
    out = tmp_path_factory.mktemp("run")
    assert run_sweep(load_sweep(sweep), out, progress=False, log=lambda m: None).exit_code == 0
    return out


def _caption_words(run_dir) -> list[int]:
    captions = pl.concat([pl.read_parquet(p) for p in (run_dir / "captions").glob("*.parquet")])
    return [len(t.split()) for t in captions.unique(subset=["caption_key"])["text"]]


def test_compare_across_protocols_json_has_both_analyses(run_dir, capsys):
    assert cli_main(["compare", str(run_dir), "--across", "protocols", "--json", "--resamples", "200"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"across", "rank_agreement", "length", "length_controlled", "reference_words", "reading",
            "n_resamples"} <= set(out)
    assert out["across"] == "protocols" and out["n_resamples"] == 200
    (pair,) = out["rank_agreement"]
    assert (pair["a"], pair["b"], pair["metric_a"], pair["metric_b"]) == ("capquiz", "vcinspector", "CapF1",
                                                                          "mean_score")
    assert pair["n_systems"] == 4 and pair["n_videos"] == 4 and "4 shared videos (< 20)" in pair["warning"]
    assert {"tau_b", "tau_b_low", "tau_b_high", "spearman"} <= set(pair)
    # length: one row per protocol and headline metric, each with slope and partial correlation and intervals
    assert {(r["protocol"], r["metric"]) for r in out["length"]} == {
        ("capquiz", "CapF1"), ("capquiz", "CapP"), ("capquiz", "CapR"), ("vcinspector", "mean_score")}
    assert all(r["n_captions"] == 16 and {"slope_item", "slope_item_low", "partial_r_item", "slope_system",
                                          "r_system"} <= set(r) for r in out["length"])
    # the reference length is the median of the judged captions' word counts; one controlled score per system
    assert out["reference_words"] == statistics.median(_caption_words(run_dir))
    assert len(out["length_controlled"]) == 4 * 4  # 4 systems x (3 CapQuiz metrics + 1 VC-Inspector)
    results = pl.read_parquet(run_dir / "results.parquet").filter(
        (pl.col("protocol") == "vcinspector") & (pl.col("metric") == "mean_score"))
    for r in (r for r in out["length_controlled"] if r["protocol"] == "vcinspector"):
        sel = results.filter((pl.col("prompt_id") == r["prompt_id"]) & (pl.col("frame_spec") == r["frame_spec"]))
        assert r["value"] == pytest.approx(sel["value"][0])  # the protocol's own number for that system


def test_compare_across_text_and_usage(run_dir, capsys):
    assert cli_main(["compare", str(run_dir), "--across", "protocols", "--resamples", "100",
                     "--reference-words", "30"]) == 0
    text = capsys.readouterr().out
    assert "== rank agreement across protocols" in text and "capquiz (CapF1) vs vcinspector (mean_score)" in text
    assert "== length sensitivity" in text and "== length-controlled scores at 30 words" in text
    # one judge: nothing to hold against each other across judges (exit 2, said)
    assert cli_main(["compare", str(run_dir), "--across", "judges", "--resamples", "50"]) == 2
    assert "no two judges scored the same system" in capsys.readouterr().out
    assert cli_main(["compare", str(run_dir), "--across", "protocols", "--a", "brief"]) == 2
    assert "--a" in capsys.readouterr().err
    assert cli_main(["compare", str(run_dir), "--reference-words", "30"]) == 2


def test_the_report_has_the_section_for_two_protocols_and_not_for_one(run_dir, tmp_path):
    html = write_report(run_dir, tmp_path / "two.html", n_resamples=100).read_text()
    assert "<section id='across'>" in html and "Rank agreement across protocols" in html
    assert "Length-controlled scores at" in html and "vcinspector" in html.split("<section id='across'>")[1]
    one = tmp_path / "one.parquet"
    systems = [{"captioner": "m", "prompt_id": p, "frame_spec": "uniform:8"} for p in ("a", "b")]
    pl.concat([verdict_rows(s, random_codes(5, 3, [0.2, 0.5, 0.3], seed=i)) for i, s in enumerate(systems)]
              ).write_parquet(one)
    html_one = write_report(one, tmp_path / "one.html", n_resamples=50).read_text()
    assert "<section id='across'>" not in html_one and "<section id=\"comparisons\">" in html_one
