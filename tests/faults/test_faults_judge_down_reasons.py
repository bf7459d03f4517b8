"""A sweep whose judge is down shows no number for its cells, only reasons (issue 16, "Done when"): the results
table (Parquet and CSV) has null values and CIs with a reason naming the connection error and its count, the
terminal table and `capeval report`'s leaderboard print it, run.json records it, the HTML report's leaderboard cells
show it; the exit code stays FAILURES (3)."""

from __future__ import annotations

import html
import json
import re

import polars as pl

from _faults_support import capeval, free_port, openai_judge, sweep, sweep_text, synthetic
from capeval.engine import exitcodes

N_VIDEOS, ITEMS_PER_VIDEO = 2, 4


def test_a_sweep_with_its_judge_down_shows_reasons_and_no_number(tmp_path, sweep_file):
    path = sweep_file(sweep_text(dataset=synthetic(N_VIDEOS), judge=openai_judge(f"http://127.0.0.1:{free_port()}/v1")))
    out = tmp_path / "out"
    run = sweep(path, out)
    assert run.returncode == exitcodes.FAILURES, run  # as before: a failed run is a failed run

    results = pl.read_parquet(out / "results.parquet")
    assert results.height and {"CapP", "CapR", "CapF1"} <= set(results["metric"])
    for column in ("value", "ci_low", "ci_high"):
        assert results[column].is_null().all(), results.filter(pl.col(column).is_not_null())
    reasons = set(results["reason"])
    assert len(reasons) == 1
    reason = reasons.pop()
    # the first error, as the judge client reported it, and how many rows failed that way
    assert re.fullmatch(r"no verdicts: failed after 2 attempts: .*Cannot connect to host 127\.0\.0\.1.* \(x8\)",
                        reason), reason
    assert set(pl.read_csv(out / "results.csv")["reason"]) == {reason}

    # the terminal: the table has no number in a value column, and the reason follows it
    table = [line for line in run.stdout.splitlines() if line.startswith("│") and re.search(r"\bCap(P|R|F1)\b", line)]
    assert len(table) == 3 and all(line.count("null") == 3 for line in table), run.stdout
    assert f"local brief uniform:2: CapF1, CapP, CapR: {reason}" in run.stdout

    record = json.loads((out / "run.json").read_text())["runs"][-1]
    assert record["no_value"] == [{"system": {"dataset": "shapes", "captioner": "local", "prompt_id": "brief",
                                              "frame_spec": "uniform:2", "protocol": "capquiz", "judge": "openai",
                                              "seed": "0"},
                                   "metrics": ["CapF1", "CapP", "CapR"], "reason": reason}]

    report = capeval(["report", out])
    assert report.returncode == 0, report
    board = report.stdout.split("-- by")[0]
    assert board.count("no verdicts!") == 3 and reason in board and not re.search(r"\d\.\d \[", board)
    page = (out / "report.html").read_text()
    leaderboards = page.split("<section id=\"leaderboards\">")[1].split("</section>")[0]
    cells = re.findall(r"<td class='reason'[^>]*>([^<]*)</td>", leaderboards)
    assert cells == [html.escape(reason)] * 3
