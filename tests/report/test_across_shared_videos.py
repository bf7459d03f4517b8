"""`capeval compare --across judges` holds two judges against each other only on the videos both judged: a judge's
rows without a verdict (a judge that was down, a video it never got to) do not make a video judged. Two judges
with no judged video in common get no tau_b and a warning saying so; two that overlap on part of the videos are
compared on that part, with the counts said, and tau_b equals scipy's tau_b of CapQuiz's own CapF1 of each judge's
verdicts on those videos. Verdict tables written to disk and read by the real command (capeval.engine.cli.main)."""

from __future__ import annotations

import json

import polars as pl
import pytest
from scipy.stats import kendalltau

from _verdicts import verdict_rows
from capeval.engine.cli import main
from capeval.engine.protocols.capquiz.metrics import compute_metrics as capquiz_metrics

CORRECT, WRONG = 1, 2  # CapQuiz codes (0: cannot be determined)
N_QUESTIONS = 4


def _system(i: int) -> dict:
    return {"captioner": "m", "prompt_id": f"p{i}", "frame_spec": "uniform:8"}


def _judge(name: str, judged: range, correct_on: dict[range, list[int]], n_videos: int) -> pl.DataFrame:
    """Rows for every video of every system; verdicts only on `judged` videos (the others: no verdict). System i
    answers correct_on[r][i] of the N_QUESTIONS questions correctly on the videos of range r."""
    frames = []
    for i in range(3):
        codes = []
        for v in range(n_videos):
            if v not in judged:
                codes.append([-1] * N_QUESTIONS)
                continue
            k = next(c[i] for r, c in correct_on.items() if v in r)
            codes.append([CORRECT] * k + [WRONG] * (N_QUESTIONS - k))
        rows = verdict_rows(_system(i), codes, judge=name)
        frames.append(rows.with_columns((pl.lit(f"{name}-") + pl.col("request_key")).alias("request_key")))
    return pl.concat(frames)


def _across(tmp_path, verdicts: pl.DataFrame, capsys) -> tuple[dict, str]:
    path = tmp_path / "verdicts.parquet"
    verdicts.write_parquet(path)
    assert main(["compare", str(path), "--across", "judges", "--json", "--resamples", "200"]) == 0
    (pair,) = json.loads(capsys.readouterr().out)["rank_agreement"]
    assert main(["compare", str(path), "--across", "judges", "--resamples", "50"]) == 0
    return pair, capsys.readouterr().out


def test_judges_with_no_judged_video_in_common_get_no_rank_agreement(tmp_path, capsys):
    same = {range(0, 40): [1, 2, 3]}
    v = pl.concat([_judge("A", range(0, 20), same, 40), _judge("B", range(20, 40), same, 40)])
    pair, text = _across(tmp_path, v, capsys)
    assert (pair["a"], pair["b"]) == ("A", "B")
    assert pair["n_videos"] == 0 and pair["n_videos_a"] == 20 and pair["n_videos_b"] == 20
    assert pair["tau_b"] is None and pair["tau_b_low"] is None and pair["spearman"] is None
    assert pair["warning"] == "no video judged by both raters (A judged 20, B 20, none in common): rank agreement " \
                              "undefined"
    assert "tau_b = - [-, -]" in text and "videos both judged = 0 (of 20 and 20)" in text


def test_judges_overlapping_on_part_of_the_videos_are_compared_there(tmp_path, capsys):
    # both judges see p0 < p1 < p2 on the shared videos 20-39; on the videos only A judged (0-19) the order is
    # reversed strongly enough to reverse A's order over all its videos
    a = _judge("A", range(0, 40), {range(0, 20): [4, 2, 0], range(20, 60): [1, 2, 3]}, 60)
    b = _judge("B", range(20, 60), {range(0, 20): [4, 2, 0], range(20, 60): [1, 2, 3]}, 60)
    pair, text = _across(tmp_path, pl.concat([a, b]), capsys)
    assert pair["n_videos"] == 20 and pair["n_videos_a"] == 40 and pair["n_videos_b"] == 40
    assert "over the 20 videos both judged (40 and 40 judged by each)" in pair["warning"]
    assert "videos both judged = 20 (of 40 and 40)" in text

    shared = [f"v{k:03d}" for k in range(20, 40)]
    values = {}
    for name, rows in (("A", a), ("B", b)):
        m = capquiz_metrics(rows.filter(pl.col("video_id").is_in(shared)).drop("dataset", "protocol_name"),
                            n_resamples=0)
        m = m.filter((pl.col("family") == "all") & (pl.col("question_type") == "all") & (pl.col("metric") == "CapF1"))
        values[name] = dict(zip(m["prompt_id"], m["value"]))
    systems = sorted(values["A"])
    expected = kendalltau([values["A"][s] for s in systems], [values["B"][s] for s in systems], variant="b").statistic
    assert expected == 1.0
    assert pair["tau_b"] == pytest.approx(expected)
    assert pair["tau_b_low"] <= pair["tau_b"] <= pair["tau_b_high"]
