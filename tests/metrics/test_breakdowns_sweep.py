"""A synthetic CapQuiz sweep with `[options] breakdowns = ["task", ...]`: each cell's metrics per task land in
results.parquet (level rows equal CapQuiz's metrics on that task's verdicts alone, overall rows the cell's unsplit
metrics), the terminal report and the HTML report show them with the small-sample warning, `capeval report --by`
adds an attribute the sweep did not ask for, and an attribute no item carries is a usage error listing the
available ones."""

from __future__ import annotations

import contextlib
import io

import polars as pl
import pytest

from _sweeps import write_sweep
from capeval.engine.cli import main
from capeval.engine.metrics.reasons import explain_nulls
from capeval.engine.registry import lookup
from capeval.engine.report.rundir import load_items, load_run

TASKS = {"scene", "counting", "object", "action"}  # the synthetic kind's question kinds
KEYS = ["family", "question_type", "metric"]


@pytest.fixture(scope="module")
def run(tmp_path_factory, ray_local):
    root = tmp_path_factory.mktemp("breakdowns")
    sweep = write_sweep(root, "bd", prompts=("brief",), frames=("uniform:2",), n_videos=3,
                        options={"breakdowns": ["task", "sub_category"]})
    out, log = root / "run", io.StringIO()
    with contextlib.redirect_stderr(log):
        assert main(["sweep", str(sweep), "--out", str(out)]) == 0
    (root / "sweep.log").write_text(log.getvalue())
    return out


def _cell_metrics(verdicts: pl.DataFrame, items: pl.DataFrame) -> pl.DataFrame:
    """CapQuiz's metrics as the sweep computes a cell's (100 resamples, seed 0), computed here independently."""
    scored = verdicts.drop([c for c in ("item_status", "retryable") if c in verdicts.columns])
    frame = lookup("protocol", "capquiz").compute_metrics(scored, items=items, n_resamples=100, seed=0)
    return explain_nulls(frame, verdicts)


def _same(got: pl.DataFrame, expected: pl.DataFrame) -> None:
    cols = ["value", "ci_low", "ci_high", "n", "n_no_verdict"]
    joined = expected.select(*KEYS, *cols).join(got.select(*KEYS, *cols), on=KEYS, suffix="_run")
    assert joined.height == expected.height == got.height
    for c in cols:
        assert joined[c].to_list() == joined[f"{c}_run"].to_list(), c


def test_sweep_breakdowns_are_in_results_and_equal_each_tasks_own_metrics(run):
    results = pl.read_parquet(run / "results.parquet")
    assert set(results["by"]) == {"all", "task"}
    assert set(results.filter(pl.col("by") == "task")["task"]) == TASKS
    assert set(results.filter(pl.col("by") == "all")["task"]) == {"all"}

    data = load_run(run)
    items = load_items(data).drop("dataset")
    raw = pl.concat([pl.read_parquet(p) for p in (run / "verdicts").glob("*.parquet")], how="diagonal_relaxed")
    assert raw["cell_key"].n_unique() == 1  # one cell: one prompt, one frame spec, one judge
    _same(results.filter(pl.col("by") == "all"), _cell_metrics(raw, items))
    for task in TASKS:
        own = raw.filter(pl.col("task") == task)
        level = results.filter((pl.col("by") == "task") & (pl.col("task") == task))
        _same(level, _cell_metrics(own, items.filter(pl.col("task") == task)))
        assert set(level["level_videos"]) == {3}


def test_report_shows_the_sweeps_breakdowns_and_computes_more_with_by(run, tmp_path, capsys):
    html = tmp_path / "report.html"
    assert main(["report", str(run), "--out", str(html)]) == 0
    printed = capsys.readouterr().out
    assert "== capquiz by task" in printed and "fewer than 20 videos" in printed
    page = html.read_text()
    section = page[page.index("<section id=\"breakdowns\">"):page.index("<section id=\"plots\">")]
    assert "capquiz by task</h3>" in section and all(f"<td>{t}</td>" in section for t in TASKS)
    assert "rest on fewer than 20 videos" in section

    # an attribute the sweep did not ask for: computed from the run's verdicts and the items its sweep file names
    assert main(["report", str(run), "--out", str(html), "--by", "category"]) == 0
    page = html.read_text()
    section = page[page.index("<section id=\"breakdowns\">"):page.index("<section id=\"plots\">")]
    assert "capquiz by task</h3>" in section and "capquiz by category</h3>" in section
    assert all(f"<td>{c}</td>" in section for c in ("Setting", "Attribute", "Entity", "Action"))


def test_sweep_skips_an_attribute_its_items_lack_and_report_by_it_is_an_error(run, tmp_path, capsys):
    log = (run.parent / "sweep.log").read_text()
    assert "note: breakdowns" in log and "sub_category: skipped: no item attribute 'sub_category'" in log
    results = pl.read_parquet(run / "results.parquet")
    assert "sub_category" not in results.columns  # the synthetic items carry no such key: skipped, said in the log
    assert main(["report", str(run), "--out", str(tmp_path / "r.html"), "--by", "sub_category"]) == 2
    err = capsys.readouterr().err
    assert "--by: no item attribute 'sub_category'" in err and "available:" in err and "category" in err
    assert not (tmp_path / "r.html").exists()
