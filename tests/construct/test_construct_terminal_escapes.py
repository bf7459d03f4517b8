"""CapQuiz construction whose generator answers with escape sequences in its categories and options: nothing it
prints reaches the terminal raw (tests/report/test_terminal_escapes.py checks the other commands)."""

from __future__ import annotations

import json

from capeval.engine.cli import main

from _capquiz_inputs import generated_questions, make_videos
from _terminal_escapes import HOSTILE, assert_escaped


def test_construct_prints_no_raw_escapes(tmp_path, capfd, ray_local):
    """CapQuiz construction whose generator answers with hostile categories and options."""
    videos, truths = make_videos(tmp_path / "videos", n=1)
    replies = tmp_path / "replies.jsonl"
    with replies.open("w") as f:
        for vid, truth in truths.items():
            questions = generated_questions(vid, truth)
            for q in questions:
                q["category"] += HOSTILE
                q["options"] = [o + HOSTILE for o in q["options"]]
                q["answer"] += HOSTILE
            f.write(json.dumps({"item_id": vid, "step": "generate", "text": json.dumps(questions)}) + "\n")
    code = main(["construct", "capquiz", "--input", str(videos), "--out", str(tmp_path / "quiz"), "--judge", "local",
                 "--step-judge", "generate=replay", "--judge-option", f"replay:replies={replies}"])
    assert code in (0, 3)
    assert_escaped(capfd.readouterr(), "construct", expect_visible=False)
