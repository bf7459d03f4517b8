"""End-of-run messages say what happened: rows never asked for want of a caption are not called backend failures; a
request asked again and again is one request, not ten; an over-size reply names the size cap; equal bad-media causes
group into one line whatever the videos' paths. Real judge loop and cache (ReplayJudge), the local judge through
`capeval judge`, and real broken videos through the decode stage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa

from capeval.adapters.replay import ReplayJudge
from capeval.engine import exitcodes
from capeval.engine.cli import main
from capeval.engine.judging.runner import run_judging
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS, ITEMS, NO_VERDICT, conform

CAPQUIZ_PACK = Path(__file__).resolve().parents[2].parent / "shared" / "protocols" / "capquiz.toml"


def _capquiz_requests(n_items: int, **params):
    items = conform(pa.table({
        "benchmark": ["capquiz"] * n_items, "task": ["count"] * n_items, "item_id": [f"v0/q{i}" for i in range(n_items)],
        "video_id": ["v0"] * n_items, "annotation": [f"How many shapes, question {i}?" for i in range(n_items)],
        "options": [["1", "2", "3", "4", "5"]] * n_items, "answer": ["2"] * n_items,
        "category": ["counting"] * n_items}), ITEMS)
    caps = conform(pa.table({"caption_key": ["k0"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
                             "video_id": ["v0"], "text": ["Two shapes move."]}), CAPTIONS)
    protocol = lookup("protocol", "capquiz")
    return protocol, protocol.build_requests(items, caps, judge="replay", judge_revision="r1", seeds=(0,), **params)


def test_one_request_asked_ten_times_is_one_request(tmp_path, capsys):
    """Official mode asks a request the backend failed again (here up to 9 re-asks): 10 failed answers of one
    request, which the warning must not call "10 of 10 finished requests"."""
    params = {"mode": "official", "prompts": str(CAPQUIZ_PACK)}
    protocol, requests = _capquiz_requests(1, **params)
    verdicts, summary = run_judging(requests, ReplayJudge([]), cache_dir=tmp_path, protocol=protocol, progress=False,
                                    protocol_params=params, return_summary=True, max_reasks=9)
    assert summary.sent == 10 and verdicts.column("verdict").to_pylist() == [NO_VERDICT]
    err = capsys.readouterr().err
    assert "10 of 10 answers failed (1 request and 9 re-asks of failed ones" in err, err
    assert "finished requests failed" not in err


def test_an_over_size_reply_is_named_with_the_size_cap(tmp_path, capsys):
    items = conform(pa.table({"benchmark": ["vidcapbench"] * 2, "task": ["default"] * 2, "item_id": ["q0", "q1"],
                              "video_id": ["v0"] * 2, "annotation": ["Question 0?", "Question 1?"],
                              "answer": ["answer 0", "answer 1"]}), ITEMS)
    caps = conform(pa.table({"caption_key": ["k0"], "captioner": ["m"], "prompt_id": ["p"], "frame_spec": ["f"],
                             "video_id": ["v0"], "text": ["Two red kites over a park."]}), CAPTIONS)
    protocol = lookup("protocol", "vidcapbench")
    requests = protocol.build_requests(items, caps, judge="replay", judge_revision="r1", seeds=(0,))
    replies = [{"item_id": "q0", "step": "answer", "text": "answer 0"},
               {"item_id": "q0", "step": "score", "text": '{"score": 2}' + " " * 500},
               {"item_id": "q1", "step": "answer", "text": "answer 1"},
               {"item_id": "q1", "step": "score", "text": '{"score": 1}'}]
    judge = ReplayJudge(replies)
    judge.max_reply_chars = 200  # a judge object may set its own cap (engine/judging/loop.py)
    verdicts = run_judging(requests, judge, cache_dir=tmp_path, protocol=protocol, progress=False)
    rows = {r["item_id"]: r for r in verdicts.to_pylist()}
    assert rows["q1"]["verdict"] != NO_VERDICT and rows["q0"]["verdict"] == NO_VERDICT
    err = capsys.readouterr().err
    assert "1 of 4 finished requests failed" in err, err
    assert "first error: reply too large: 512 characters, over the size cap max_reply_chars 200" in err, err
    assert "no reply" not in err


def test_items_without_a_caption_are_not_called_backend_failures(tmp_path, capsys):
    items, captions = tmp_path / "items.jsonl", tmp_path / "captions.jsonl"
    items.write_text("".join(json.dumps({"item_id": f"v{v}/q", "video_id": f"v{v}", "task": "count",
                                         "annotation": "How many shapes?", "options": ["1", "2", "3", "4", "5"],
                                         "answer": "2", "category": "counting", "benchmark": "capquiz"}) + "\n"
                             for v in range(4)))
    captions.write_text("".join(json.dumps({"video_id": f"v{v}", "caption": "Two shapes move."}) + "\n"
                                for v in range(2)))  # captions for half the videos; the judge answers every request
    code = main(["judge", "--protocol", "capquiz", "--items", str(items), "--captions", str(captions), "--judge",
                 "local", "--out", str(tmp_path / "v.parquet"), "--resamples", "0", "--no-progress"])
    assert code == exitcodes.FAILURES
    err = capsys.readouterr().err
    end = next(line for line in err.splitlines() if "completed with failures" in line)
    assert "2 of 4 verdict rows have no verdict" in end
    assert "2 never asked: no caption for their item" in end, end
    assert "failed to answer" not in end and "asks them again" not in end, end


def test_equal_bad_media_causes_group_whatever_the_path(tmp_path):
    """Damaged videos of the same kinds in two folders (real files, decoded by the sweep's decode stage): one
    summary line per cause with its count, no path in it."""
    from capeval.engine.datasets.synthetic_videos import make_broken_videos
    from capeval.engine.frames.sampling import FrameSpec
    from capeval.engine.stages.decode import decode_one
    from capeval.engine.sweep.accounting import RunAccount, classify_verdicts

    broken = make_broken_videos(tmp_path / "a", size=(96, 64), large=False)
    videos = {}
    for kind in ("zero_bytes", "not_a_video", "audio_only"):
        videos[f"{kind}-1"] = broken[kind]
        videos[f"{kind}-2"] = tmp_path / "b" / f"other_{broken[kind].name}"
        videos[f"{kind}-2"].parent.mkdir(exist_ok=True)
        shutil.copyfile(broken[kind], videos[f"{kind}-2"])
    failures = {vid: decode_one(str(path), vid, FrameSpec.parse("uniform:4"), str(tmp_path / "cache"))["failure"]
                for vid, path in videos.items()}
    assert all(f is not None and f.status == "bad_media" for f in failures.values())
    verdicts = pa.table({"item_id": [f"{v}/q" for v in videos], "video_id": list(videos),
                         "verdict": pa.array([NO_VERDICT] * len(videos), pa.int8()),
                         "parse_status": pa.array([4] * len(videos), pa.int8()),
                         "error": pa.array([None] * len(videos), pa.string())})
    account = RunAccount()
    account.add_cell(classify_verdicts(verdicts, failures), "complete")
    lines = [line for line in account.summary().splitlines() if "bad_media (permanent)" in line]
    assert len(lines) == 3, account.summary()
    assert all(line.split()[0] == "2" for line in lines), account.summary()
    assert not any(str(tmp_path) in line for line in lines), lines
