"""CapQuiz official mode counts what the paper defines (issue 26 item 14), through the production path (items ->
build_requests with the benchmark's pack -> replay judge -> run_judging -> compute_metrics):

* N is every question (paper §3.4: CapR = TP / N): a question whose video has no caption stays in N as a row without
  a verdict, in official mode as in strict mode;
* `average = "per_video"` reports CapF1 = 2·CapP·CapR / (CapP + CapR) of the CapP and CapR it reports, the relation
  every row of the paper's Tables 3-4 satisfies (a mean of per-video F1s does not)."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from capeval.adapters.replay import ReplayJudge
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.capquiz.metrics import compute_metrics
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, ParseStatus, conform

PACK = Path(os.environ.get("CAPEVAL_PACK_DIR", Path(__file__).resolve().parents[2].parent / "shared" / "protocols")) \
    / "capquiz.toml"
OPTIONS = ["a red kite", "a blue umbrella", "a green bicycle", "a yellow boat", "a white dog"]
CAPTION = "A girl walks through a park and opens a blue umbrella when it starts to rain."


def _quiz(video: str, n: int, category: str = "Entity") -> list[dict]:
    return [{"task": "capquiz", "item_id": f"{video}-q{i}", "video_id": video, "annotation": f"Question {i} about {video}?",
             "options": OPTIONS, "answer": "a blue umbrella", "category": category} for i in range(n)]


def _run(tmp_path, rows: list[dict], captioned: list[str], answers: dict[str, str], **params):
    items = conform(pa.table({k: [r.get(k) for r in rows] for k in ITEMS.names}
                             | {"benchmark": ["capquiz"] * len(rows)}), ITEMS)
    n = len(captioned)
    captions = conform(pa.table({"caption_key": [f"k-{v}" for v in captioned], "captioner": ["m"] * n,
                                 "prompt_id": ["p"] * n, "frame_spec": ["f"] * n, "video_id": captioned,
                                 "text": [CAPTION] * n}), CAPTIONS)
    judge = ReplayJudge([{"item_id": i, "step": "answer", "text": t} for i, t in answers.items()])
    protocol = lookup("protocol", "capquiz")
    requests = protocol.build_requests(items, captions, judge=judge.name, judge_revision=judge.revision, **params)
    verdicts = pl.from_arrow(run_judging(requests, judge, cache_dir=tmp_path / "cache", protocol=protocol,
                                         protocol_params=params, progress=False))
    metrics = compute_metrics(verdicts, items=pl.from_arrow(items), n_resamples=0, **params)
    return verdicts, metrics


def _overall(metrics: pl.DataFrame, metric: str) -> dict:
    rows = metrics.filter((pl.col("metric") == metric) & (pl.col("family") == "all")
                          & (pl.col("question_type") == "all"))
    assert rows.height == 1, rows
    return rows.row(0, named=True)


def _official() -> dict:
    if not PACK.is_file():
        pytest.skip(f"{PACK} not present")
    return {"mode": "official", "prompts": str(PACK)}


def test_official_n_counts_the_questions_of_a_video_without_a_caption(tmp_path):
    # v1: 8 right, 2 wrong, 4 "cannot be determined"; v2 (3 questions) has no caption: N = 17, not 14
    rows = _quiz("v1", 14) + _quiz("v2", 3)
    answers = {f"v1-q{i}": "B" if i < 8 else "A" if i < 10 else "F" for i in range(14)}
    verdicts, metrics = _run(tmp_path, rows, ["v1"], answers, **_official())
    uncaptioned = verdicts.filter(pl.col("video_id") == "v2")
    assert uncaptioned.height == 3 and set(uncaptioned["parse_status"]) == {int(ParseStatus.MISSING)}
    recall = _overall(metrics, "CapR")
    assert recall["value"] == pytest.approx(100 * 8 / 17) and recall["n_no_verdict"] == 3  # 47.06
    assert _overall(metrics, "CapP")["value"] == pytest.approx(100 * 8 / 10)
    assert set(metrics["mode"]) == {"official"}


@pytest.mark.parametrize("mode", ["strict", "official"])
def test_per_video_f1_is_the_f1_of_the_reported_precision_and_recall(mode, tmp_path):
    # video a: 3 right, 1 wrong; b: 1 "cannot be determined"; c: 1 right, 1 wrong
    rows = _quiz("a", 4) + _quiz("b", 1, "Causal Reasoning") + _quiz("c", 2, "Action")
    answers = {"a-q0": "B", "a-q1": "B", "a-q2": "B", "a-q3": "A", "b-q0": "F", "c-q0": "B", "c-q1": "C"}
    params = _official() if mode == "official" else {}
    _, metrics = _run(tmp_path, rows, ["a", "b", "c"], answers, average="per_video", **params)
    p, r = (3 / 4 + 1 / 2) / 2, (3 / 4 + 0 + 1 / 2) / 3
    assert _overall(metrics, "CapP")["value"] == pytest.approx(100 * p)
    assert _overall(metrics, "CapR")["value"] == pytest.approx(100 * r)
    assert _overall(metrics, "CapF1")["value"] == pytest.approx(100 * 2 * p * r / (p + r))  # 50.0, not 41.67
    wide = metrics.pivot(on="metric", index=["family", "question_type"], values="value")
    for row in wide.iter_rows(named=True):  # every row, as in the paper's tables
        P, R, F = row["CapP"], row["CapR"], row["CapF1"]
        if P is not None and R is not None and P + R > 0:
            assert F == pytest.approx(2 * P * R / (P + R)), row
