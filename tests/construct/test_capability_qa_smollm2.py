"""`capeval construct capability-qa` with a real chat model grading the open answers: SmolLM2-135M-Instruct
(adapters/smollm2.py) on vLLM's CPU engine reads capeval's grading prompt (kt_pack.toml) and replies through the
yes/no choice set. What a 135M model decides is its own business, so the test checks what the pipeline does with it:
every open answer gets a verdict from the model's reply (never a failure), the reply is kept beside it, and KT is
computed from those verdicts exactly as Eq. 4 says."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

from _fixtures_vllm import small_kv_cache
from test_capability_qa import COLOR_SCORES, release  # noqa: F401  (the fixture, with its tiny release)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # one engine start (~1-2 min on 2 cores)
smollm2 = pytest.importorskip("capeval.adapters.smollm2")
_CACHE = Path(os.environ.get("CAPEVAL_MODEL_CACHE", Path(__file__).resolve().parents[2] / ".capeval" / "models"))


def test_smollm2_grades_the_open_answers(release, ray_local, tmp_path):  # noqa: F811
    from capeval.engine.cli import main

    try:
        smollm2.find_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    model = smollm2.build_smollm2(_CACHE / "smollm2-135m-instruct")
    root, anno, script, _, run = release
    out = tmp_path / "qa"
    with small_kv_cache() as kv:
        code = main(["construct", "capability-qa", "--annotations", str(anno), "--media-root", str(root),
                     "--tasks", "object_color", "--captioner", "local", "--captioner-option", f"answers={script}",
                     "--label", "toy", "--frames", "uniform:2", "--judge", "vllm@smol",
                     "--judge-option", f"smol:model={model}", "--judge-option", "smol:max_model_len=2048",
                     "--judge-option", f"smol:kv_cache_memory_bytes={kv['kv_cache_memory_bytes']}",
                     "--caption-verdicts", str(run), "--resamples", "0", "--out", str(out), "--no-progress"])
    assert code == 0
    summary = json.loads((out / "construct.json").read_text())
    assert summary["judges"]["smol"]["name"] == "smollm2-135m-instruct"
    assert summary["steps"]["grade"] == {**summary["steps"]["grade"], "asks": 3, "failed": 0}
    qa = pl.read_parquet(out / "qa_verdicts.parquet")
    assert qa.height == 3 and set(qa["judge"].to_list()) == {"smol"}
    grades = {r["item_id"]: json.loads(r["detail"])["grade"] for r in qa.iter_rows(named=True)}
    assert all(g.strip().lower() in ("yes", "no") for g in grades.values())
    correct = {f for f, g in grades.items() if g.strip().lower() == "yes"}
    assert correct == {r["item_id"] for r in qa.iter_rows(named=True) if r["verdict"] == 1}
    kt = pl.read_parquet(out / "kt.parquet").filter((pl.col("task") == "object_color") & (pl.col("metric") == "kt"))
    told_wrong = {f for f, s in COLOR_SCORES.items() if s in (0, -1)}
    if correct:
        assert kt["value"][0] == pytest.approx(100 * len(correct & told_wrong) / len(correct))
    else:  # the model called every answer wrong: KT is 0/0, null with the reason
        assert kt["value"][0] is None and kt["note"][0]
