"""`capeval judge --out V.parquet` keeps its judge transcripts beside the verdicts (V.transcripts.parquet) and
`capeval show V.parquet` prints them: each attempt with what went wrong (a rejected reply, a backend error), and
untrusted text (a caption holding a terminal escape sequence) escaped."""

from __future__ import annotations

import json

from capeval.engine.cli import main

ESCAPE = "\x1b]0;pwned\x07\x1b[31m"


def _inputs(tmp_path):
    items, captions, replies = tmp_path / "items.jsonl", tmp_path / "captions.jsonl", tmp_path / "replies.jsonl"
    with items.open("w") as f:
        for v in range(3):
            f.write(json.dumps({"item_id": f"v{v}/q", "video_id": f"v{v}", "task": "Attribute",
                                "annotation": "What colour is the ball?",
                                "options": ["red", "blue", "green", "black", "white"], "answer": "red",
                                "category": "Attribute"}) + "\n")
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": f"Ball {v}: a red ball rolls. {ESCAPE}"})
                                + "\n" for v in range(3)))
    # v0 answers at once; v1's first reply is rejected and its re-ask answers; v2 has no reply (a backend error)
    replies.write_text("".join(json.dumps(r) + "\n" for r in (
        {"item_id": "v0/q", "step": "answer", "attempt": 0, "text": "A"},
        {"item_id": "v1/q", "step": "answer", "attempt": 0, "text": "I am not sure"},
        {"item_id": "v1/q", "step": "answer", "attempt": 1, "text": "B"})))
    return items, captions, replies


def test_judge_writes_transcripts_and_show_reads_them(tmp_path, capsys):
    items, captions, replies = _inputs(tmp_path)
    out = tmp_path / "v.parquet"
    main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions), "--judge", "replay",
          "--judge-option", f"replies={replies}", "--cache", str(tmp_path / "cache"), "--out", str(out),
          "--no-progress", "--resamples", "0", "--max-failure-share", "1"])
    assert (tmp_path / "v.transcripts.parquet").is_file()
    assert not list(tmp_path.glob(".*.tmp"))
    capsys.readouterr()
    assert main(["show", str(out), "--json"]) == 0
    records = {r["item_id"]: r for r in json.loads(capsys.readouterr().out)["requests"]}
    assert sorted(records) == ["v0/q", "v1/q", "v2/q"]
    v0, v1, v2 = records["v0/q"], records["v1/q"], records["v2/q"]
    assert [a["source"] for a in v0["attempts"]] == ["sent"] and v0["verdict_label"] == "CORRECT"
    assert v0["caption"].startswith("Ball 0") and v0["caption"] in v0["messages"][-1]["content"]
    assert v0["cell"]["protocol"] == "capquiz" and v0["sampling"]["choices"]
    first, second = v1["attempts"]
    assert first["reply"] == "I am not sure" and first["status"] == "failed" and first["error"]
    assert second["reply"] == "B" and second["temperature"] > first["temperature"] == 0.0
    assert v1["parse"]["status"] == "repaired" and v1["verdict_label"] == "WRONG"
    assert v2["attempts"][0]["reply"] is None and v2["attempts"][0]["error"]  # what the backend said
    assert v2["parse"]["status"] == "error" and v2["verdict_label"] == "no verdict"
    # the text view: the same content, the caption's escape sequence shown, never sent to the terminal
    assert main(["show", str(out), "--item", "v1/q"]) == 0
    text = capsys.readouterr().out
    assert "\x1b" not in text and "\\x1b]0;pwned" in text
    assert "attempt 0 (sent" in text and "attempt 1 (sent" in text and "I am not sure" in text
    assert main(["show", str(out), "--failed", "--json"]) == 0
    assert [r["item_id"] for r in json.loads(capsys.readouterr().out)["requests"]] == ["v2/q"]
