"""`capeval judge` ends with exit code 3 when verdict rows lack a verdict beyond --max-failure-share, and appends a
run record (run.json beside the verdict file) on every run."""

from __future__ import annotations

import json

from capeval.engine import exitcodes
from capeval.engine.cli import main
from capeval.engine.runrecord import read_run_records


def _inputs(tmp_path):
    items, captions, replies = tmp_path / "items.jsonl", tmp_path / "captions.jsonl", tmp_path / "replies.jsonl"
    with items.open("w") as f:
        for v in range(3):
            f.write(json.dumps({"item_id": f"v{v}/q", "video_id": f"v{v}", "task": "Attribute",
                                "annotation": "What colour is the ball?", "options": ["red", "blue", "green", "black",
                                                                                     "white"],
                                "answer": "red", "category": "Attribute"}) + "\n")
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": f"Ball {v}: a red ball rolls."}) + "\n"
                                for v in range(3)))
    # v2 has no recorded reply: the replay backend fails it like a backend error
    replies.write_text("".join(json.dumps({"item_id": f"v{v}/q", "step": "answer", "attempt": 0, "text": "A"}) + "\n"
                               for v in range(2)))
    return items, captions, replies


def test_failures_give_exit_3_and_every_run_is_recorded(tmp_path, capsys):
    items, captions, replies = _inputs(tmp_path)
    out = tmp_path / "runs" / "v.parquet"
    argv = ["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions), "--judge", "replay",
            "--judge-option", f"replies={replies}", "--cache", str(tmp_path / "cache"), "--out", str(out),
            "--no-progress", "--resamples", "0"]
    assert main(argv) == exitcodes.FAILURES
    assert "1 of 3 verdict rows have no verdict" in capsys.readouterr().err
    assert main(argv + ["--max-failure-share", "0.5"]) == exitcodes.OK  # the run says how much failure is fine
    records = read_run_records(out.parent)
    assert [r["command"] for r in records] == ["judge", "judge"]  # appended, never replaced
    last = records[-1]
    assert last["modes"] == {"capquiz": "strict"} and last["pack_digests"]["prompts"]
    assert last["counts_by_status"]["verdicts"] == {"ok": 2, "error": 1}
    assert last["components"]["judges"]["replay"].startswith("replay:")
    assert main(argv + ["--max-failure-share", "2"]) == exitcodes.USAGE
