"""VC-Inspector mean score and score shares against hand-computed values."""

import polars as pl
import pytest

from engine.protocols.vcinspector.metrics import compute_metrics


def table(scores, videos):
    return pl.DataFrame({"item_id": [f"i{k}" for k in range(len(scores))], "task": "t", "video_id": videos,
                         "captioner": "m", "prompt_id": "p", "frame_spec": "f",
                         "verdict": [s - 1 if s > 0 else -1 for s in scores]}, schema_overrides={"verdict": pl.Int8})


def get(frame, metric, category="all"):
    return frame.filter((pl.col("metric") == metric) & (pl.col("category") == category)).row(0, named=True)


def test_mean_score_and_shares():
    scores, videos = [5, 4, 4, 1, 0], ["a", "a", "b", "c", "c"]  # 0 = no verdict
    out = compute_metrics(table(scores, videos), n_resamples=200, seed=3)
    row = get(out, "mean_score")
    assert row["value"] == pytest.approx((5 + 4 + 4 + 1) / 4) and row["n_no_verdict"] == 1
    assert row["ci_low"] <= row["value"] <= row["ci_high"]
    assert get(out, "share_4")["value"] == pytest.approx(100 * 2 / 5)
    paper = compute_metrics(table(scores, videos), n_resamples=0, paper_compatible=True)
    assert get(paper, "share_4")["value"] == pytest.approx(100 * 2 / 4)
    assert get(paper, "mean_score")["ci_low"] is None  # no resamples: no CI


def test_per_category_with_items():
    t = table([5, 1, 3], ["a", "b", "c"])
    items = pl.DataFrame({"task": "t", "item_id": ["i0", "i1", "i2"], "category": ["x", "x", "y"]})
    out = compute_metrics(t, items=items, n_resamples=20)
    assert get(out, "mean_score", "x")["value"] == pytest.approx(3.0)
    assert get(out, "mean_score", "y")["value"] == pytest.approx(3.0)
    assert get(out, "mean_score")["value"] == pytest.approx(3.0)


def test_score_command_writes_csv_and_names_a_missing_file(tmp_path, capsys):
    from engine.cli import main

    path = tmp_path / "verdicts.parquet"
    table([5, 3, 0], ["a", "b", "c"]).write_parquet(path)
    out = tmp_path / "metrics.csv"
    assert main(["score", "--protocol", "vcinspector", "--verdicts", str(path), "--out", str(out), "--resamples", "20"]) == 0
    frame = pl.read_csv(out)
    assert frame.filter(pl.col("metric") == "mean_score")["value"][0] == pytest.approx(4.0)
    assert "mean_score" in capsys.readouterr().out
    assert main(["score", "--protocol", "vcinspector", "--verdicts", str(tmp_path / "no.parquet"), "--out", str(out)]) == 1
    assert "no.parquet" in capsys.readouterr().err
