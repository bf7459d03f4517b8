"""A protocol installed from another distribution brings `capeval construct` its own pipeline: the toy protocol
(tests/toy_protocol, registered through the `capeval.protocols` entry point) declares it with the `construction` hook,
and `capeval construct --list` and `capeval construct toy` find it through the registry, with no engine file naming
it (tests/pipeline/test_toy_protocol.py checks that no engine file does).

Real components: the capeval CLI in subprocesses, the judging path with its judgment cache, the replay judge."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
from _toy_plugin import toy_plugin_env

CAPEVAL = [sys.executable, "-m", "capeval.engine.cli"]


def _capeval(args, env):
    return subprocess.run([*CAPEVAL, *args], env=env, capture_output=True, text=True, timeout=300)


def test_construct_list_names_the_plugin_pipeline_beside_the_builtin_ones(tmp_path):
    done = _capeval(["construct", "--list"], toy_plugin_env(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    names = [line.split()[0] for line in lines if line and not line[0].isspace()]
    assert names == sorted(names) and {"toy", "capability-qa", "capquiz", "lvcap", "vcinspector"} <= set(names)
    at = lines.index(next(line for line in lines if line.startswith("toy ")))
    assert "toy_mention items from the words a judge says can be seen in a video" in lines[at]
    assert lines[at + 1].split() == ["steps:", "visible"]


def test_construct_toy_builds_items_from_the_judge_replies(tmp_path):
    env = toy_plugin_env(tmp_path)
    replies = tmp_path / "replies.jsonl"
    answers = [("cat", 0, "Yes."), ("idea", 0, "no"), ("dog", 0, "yes")] + [("tree", k, "perhaps") for k in range(3)]
    replies.write_text("".join(json.dumps({"item_id": word, "step": "visible", "attempt": attempt, "text": text}) + "\n"
                               for word, attempt, text in answers))  # strict mode re-asks "perhaps" twice
    out = tmp_path / "out"
    args = ["construct", "toy", "--words", "cat, idea,dog,tree", "--video", "v1", "--judge", "replay",
            "--judge-option", f"replies={replies}", "--out", str(out), "--no-progress"]
    done = _capeval(args, env)
    assert done.returncode == 0, done.stderr[-3000:]
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert items == [{"benchmark": "toy_mention", "task": "mention", "item_id": w, "video_id": "v1", "answer": w}
                     for w in ("cat", "dog")]
    record = {r["item_id"]: r for r in pq.read_table(out / "record.parquet").to_pylist()}
    assert {w: (r["step"], r["kept"]) for w, r in record.items()} == {
        "cat": ("visible", True), "idea": ("visible", False), "dog": ("visible", True), "tree": ("visible", False)}
    assert record["idea"]["reason"] == "the judge says it cannot be seen"
    assert "expected yes or no, got 'perhaps'" in record["tree"]["reason"]
    summary = json.loads((out / "construct.json").read_text())
    assert summary["pipeline"] == "toy"
    assert {k: summary["steps"]["visible"][k] for k in ("asks", "sent", "failed")} == {"asks": 4, "sent": 6, "failed": 1}
    # a second run answers every ask from the judgment cache: the step went through the judging path
    again = _capeval(args, env)
    assert again.returncode == 0, again.stderr[-3000:]
    steps = json.loads((out / "construct.json").read_text())["steps"]["visible"]
    assert steps["sent"] == 0 and steps["cached"] == 6  # 4 asks and tree's 2 re-asks


def test_without_the_plugin_there_is_no_toy_pipeline(tmp_path):
    done = _capeval(["construct", "toy", "--words", "cat", "--judge", "local", "--out", str(tmp_path / "o")], None)
    assert done.returncode == 2 and "toy" in done.stderr
