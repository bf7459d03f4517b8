"""What a construction run ends with (issue 25 item 10, issue 26 item 11): a run that builds nothing, or whose step
fails most of its asks, exits 3 and counts the failures' reasons; CapQuiz's strict generation is constrained by its
JSON schema on a backend with structured output; the judge's progress line never passes 100% (re-asks grow its
total); a generation step keeps at most its cap of questions per video (declared by the pipeline, overridable with
--max-per-item) and the planned downstream requests are said before they are sent.

The judges are real: the loopback OpenAI-compatible server (it answers a JSON schema with a minimal valid object, so
an empty question list), the replay judge (scripted generation) and the local judge (blind trials)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
from capeval.engine import exitcodes

REPO = Path(__file__).resolve().parents[2]
PROGRESS = re.compile(r": (\d+)/(\d+) req \((\d+)%\)")


def _capeval(args: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "OPENAI_API_KEY", "CAPEVAL_JUDGE_API_KEY")}
    return subprocess.run([sys.executable, "-m", "capeval.engine.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**clean, "PYTHONPATH": os.environ.get("PYTHONPATH", ""), **env})


def _videos(folder: Path, n: int) -> Path:
    path = folder / "videos.jsonl"
    path.write_text("".join(json.dumps({"video_id": f"vid{i}", "description": f"Video {i}: a red ball rolls left "
                                        f"past a blue box."}) + "\n" for i in range(n)))
    return path


def _questions(vid: str, n: int) -> list[dict]:
    return [{"category": "Entity", "question": f"Which object number {k} appears in {vid}?",
             "options": [f"object {k}-{j}" for j in range(5)], "answer": f"object {k}-0"} for k in range(n)]


def _replies(folder: Path, per_video: dict[str, int]) -> Path:
    path = folder / "replies.jsonl"
    path.write_text("".join(json.dumps({"item_id": vid, "step": "generate", "text": json.dumps(_questions(vid, n))})
                            + "\n" for vid, n in per_video.items()))
    return path


def test_a_run_that_builds_nothing_exits_3_with_its_reasons_and_progress_stays_within_100(tmp_path):
    videos = _videos(tmp_path, 3)
    with LoopbackServer(FaultConfig()) as server:
        run = _capeval(["construct", "capquiz", "--input", str(videos), "--out", str(tmp_path / "quiz"),
                        "--judge", "openai", "--judge-option", "model=loopback",
                        "--judge-option", f"base_url={server.base_url}", "--judge-option", "structured=vllm",
                        "--trials", "0", "--dedup", "none"], tmp_path, CAPEVAL_PROGRESS_EVERY_S="0")
    assert run.returncode == exitcodes.FAILURES, run.stderr[-3000:]
    assert "no items were built" in run.stderr
    assert re.search(r"step generate: 3 of 3 asks failed \(100\.0% > --max-failure-share 50%\): "
                     r"3 x no usable question among 0 entries", run.stderr), run.stderr[-3000:]
    summary = json.loads((tmp_path / "quiz" / "construct.json").read_text())
    assert summary["steps"]["generate"]["failure_reasons"] == {"no usable question among 0 entries": 3}
    assert any("no items were built" in n for n in summary["notes"])
    # the generation request carried the step's JSON schema: the server answered with its minimal valid object
    record = pq.read_table(tmp_path / "quiz" / "record.parquet").to_pylist()
    generated = [r for r in record if r["step"] == "generate"]
    assert len(generated) == 3 and all(json.loads(r["output"]) == {"questions": []} for r in generated)
    # every progress line stays within its total, re-asks included (3 requests, each asked three times)
    shown = [(int(n), int(total), int(pct)) for n, total, pct in PROGRESS.findall(run.stderr)]
    assert shown, run.stderr[-3000:]
    assert all(n <= total and pct <= 100 for n, total, pct in shown), shown
    assert (9, 9, 100) in shown  # generation: 3 requests and 6 re-asks, all done


def test_a_step_that_fails_most_asks_exits_3_unless_allowed(tmp_path):
    videos = _videos(tmp_path, 3)
    replies = _replies(tmp_path, {"vid0": 4})  # only one of three videos gets questions
    argv = ["construct", "capquiz", "--input", str(videos), "--judge", "local", "--step-judge", "generate=replay",
            "--judge-option", f"replay:replies={replies}", "--no-taxonomy", "--trials", "1", "--min-correct", "1",
            "--dedup", "none", "--no-progress"]
    run = _capeval(argv + ["--out", str(tmp_path / "a")], tmp_path)
    assert run.returncode == exitcodes.FAILURES, run.stderr[-3000:]
    assert "step generate: 2 of 3 asks failed (66.7% > --max-failure-share 50%)" in run.stderr
    assert "no items were built" not in run.stderr
    allowed = _capeval(argv + ["--out", str(tmp_path / "b"), "--max-failure-share", "0.7"], tmp_path)
    assert allowed.returncode == 0, allowed.stderr[-3000:]


def test_generation_is_capped_per_video_and_the_plan_is_said_before_spending(tmp_path):
    videos = _videos(tmp_path, 2)
    replies = _replies(tmp_path, {"vid0": 2000, "vid1": 2000})
    argv = ["construct", "capquiz", "--input", str(videos), "--judge", "local", "--step-judge", "generate=replay",
            "--judge-option", f"replay:replies={replies}", "--no-taxonomy", "--classify", "none", "--trials", "1",
            "--min-correct", "1", "--dedup", "none", "--no-progress"]
    run = _capeval(argv + ["--out", str(tmp_path / "a")], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    cap = 2 * 2 * 10  # twice what the strict prompt asks for: --per-type 2 of ten types
    record = pq.read_table(tmp_path / "a" / "record.parquet").to_pylist()
    over = [r for r in record if r["step"] == "generate" and "over the cap" in (r["reason"] or "")]
    assert len(over) == 2 * (2000 - cap)
    trials = [r for r in record if r["step"] == "blind" and r["trial"] is not None]
    assert len(trials) == 2 * cap  # only the kept questions were asked about
    lines = run.stderr.splitlines()
    before = next(i for i, line in enumerate(lines) if "plan: generate 2 requests" in line)
    assert f"at most {cap} questions kept per video and generator (--max-per-item generate={cap}), so at most " \
           f"{2 * cap} candidates and {2 * cap} blind requests" in lines[before]
    after = next(i for i, line in enumerate(lines) if f"plan: {2 * cap} candidates -> up to 0 classify, {2 * cap} "
                 f"blind and 0 dedup requests" in line)
    blind = next(i for i, line in enumerate(lines) if "step blind:" in line)
    assert before < after < blind  # said before the blind requests were sent
    assert json.loads((tmp_path / "a" / "construct.json").read_text())["config"]["step_caps"] == {"generate": cap}

    smaller = _capeval(argv + ["--out", str(tmp_path / "b"), "--max-per-item", "generate=5"], tmp_path)
    assert smaller.returncode == 0, smaller.stderr[-3000:]
    record = pq.read_table(tmp_path / "b" / "record.parquet").to_pylist()
    assert len([r for r in record if r["step"] == "blind" and r["trial"] is not None]) == 2 * 5

    wrong = _capeval(argv + ["--out", str(tmp_path / "c"), "--max-per-item", "blind=3"], tmp_path)
    assert wrong.returncode == exitcodes.USAGE
    assert "caps no step 'blind'" in wrong.stderr and "generate (questions per video" in wrong.stderr
