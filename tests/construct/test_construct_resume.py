"""A construction run killed with kill -9 in the middle of its generation step, started again: the finished
generations come from the judgment cache and are never sent again; only the rest is generated. The backend logs
every request it answers (tests/construct/_slow_judge.py), so the test counts real backend calls."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from _capquiz_inputs import generation_replies, make_videos

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
N = 6
LAUNCH = ("import sys; sys.path[:0] = [sys.argv.pop(1), sys.argv.pop(1)]; import _slow_judge; "
          "from capeval.engine.cli import main; sys.exit(main(sys.argv[1:]))")


def _command(videos: Path, replies: Path, out: Path, log: Path, delay: float) -> list[str]:
    return [sys.executable, "-c", LAUNCH, str(HERE), str(REPO), "construct", "capquiz", "--input", str(videos),
            "--out", str(out), "--no-taxonomy", "--judge", "local", "--step-judge", "generate=slow-replay",
            "--judge-option", f"slow-replay:replies={replies}", "--judge-option", f"slow-replay:log={log}",
            "--judge-option", f"slow-replay:delay_s={delay}", "--max-in-flight", "1", "--no-progress"]


def _sent(log: Path, step: str = "generate") -> list[str]:
    if not log.is_file():
        return []
    return [line.split()[1] for line in log.read_text().splitlines() if line.split()[0] == step]


def test_killed_run_resumes_without_regenerating(tmp_path):
    videos, truths = make_videos(tmp_path / "videos", N)
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps(r) + "\n" for r in generation_replies(truths)))
    out, log1, log2 = tmp_path / "quiz", tmp_path / "run1.log", tmp_path / "run2.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

    proc = subprocess.Popen(_command(videos, replies, out, log1, 1.0), cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 180
    while len(_sent(log1)) < 3:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "the first run generated too slowly"
        time.sleep(0.05)
    time.sleep(0.3)  # an answer is committed within ~0.05 s of arriving; the next one takes 1 s
    proc.kill()  # SIGKILL: no cleanup, no flush
    proc.wait()
    first = _sent(log1)
    assert 3 <= len(first) < N, "the kill landed after the generation step finished"
    with sqlite3.connect(out / "judge-cache" / "judgments.sqlite") as db:
        cached = {k for (k,) in db.execute("SELECT request_key FROM judgments")}
    assert cached == set(first)  # every answered generation was committed before the kill

    done = subprocess.run(_command(videos, replies, out, log2, 0.0), cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    second = _sent(log2)
    assert not set(second) & cached  # nothing finished before the kill was generated again
    assert len(second) == N - len(cached) and len(set(first) | set(second)) == N
    summary = json.loads((out / "construct.json").read_text())
    assert summary["steps"]["generate"] == {**summary["steps"]["generate"], "asks": N, "sent": N - len(cached),
                                            "cached": len(cached)}
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert {i["video_id"] for i in items} == set(truths)  # every video's questions are in the output
