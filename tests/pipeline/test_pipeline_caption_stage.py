"""The Ray caption stage on real decoded videos: rows keyed by content, resume by key, and a caption actor that dies
(a real process exit) is restarted and its unfinished videos retried."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _caption_worker import RecordingCaptioner, worker_around
from capeval.adapters.local_captioner import describe
from capeval.engine.prompts_library import get_prompt
from capeval.engine.schemas import CAPTIONS
from capeval.engine.keys import caption_key
from capeval.engine.stages.caption import CaptionTask, read_captions, run_caption_stage
from capeval.engine.stages.decode import decode_stream
from capeval.engine.frames.cache import load_frames
from capeval.engine.store import SegmentStore

N_VIDEOS = 5
PROMPTS = ("capquiz_standard", "brief")


@pytest.fixture(scope="module")
def decoded(tmp_path_factory, ray_local):
    """FRAMES rows of real H.264 videos (capeval.engine.datasets.synthetic_videos), decoded by Ray tasks through the frame cache."""
    from capeval.engine.datasets.synthetic_videos import make_video

    root = tmp_path_factory.mktemp("stage")
    videos = []
    for i in range(N_VIDEOS):
        path = root / f"v{i}.mp4"
        make_video(path, codec="h264", seconds=1.5, fps=12, size=(160, 120), seed=100 + i)
        videos.append((f"v{i}", str(path)))
    rows = [r for batch in decode_stream(videos, ["uniform:4"], cache_dir=str(root / "frames")) for r in batch]
    assert len(rows) == N_VIDEOS and all(r["error"] is None for r in rows)
    return sorted(rows, key=lambda r: r["video_id"])


def _tasks(rows):
    out = []
    for r in rows:
        for p in PROMPTS:
            text = get_prompt(p).text
            out.append(CaptionTask(caption_key(r["frames_key"], "local", "pixelstats-1", text, {}), r["video_id"],
                                   r["path"], tuple(r["timestamps"]), r["frame_spec"], p, text))
    return out


def _expected(rows):
    """Captions computed in this process, without Ray: what the actors must produce."""
    return {t.caption_key: describe(load_frames(t.frames_path), t.prompt_text) for t in _tasks(rows)}


def test_stage_captions_every_video_and_resumes_by_key(decoded, tmp_path, ray_local):
    store = SegmentStore(tmp_path / "captions", CAPTIONS)
    stats = run_caption_stage(iter(_tasks(decoded)), captioner="local", store=store, n_videos=N_VIDEOS,
                              progress=False)
    assert stats["captioned"] == N_VIDEOS * len(PROMPTS) and stats["failed"] == 0 and stats["cached"] == 0
    table = read_captions(store)
    got = dict(zip(table.column("caption_key").to_pylist(), table.column("text").to_pylist()))
    assert got == _expected(decoded)
    assert all(n > 0 for n in table.column("n_tokens").to_pylist())
    assert set(table.column("frame_spec").to_pylist()) == {"uniform:4"}
    segments = len(store.segments())
    assert segments >= 1  # appended as captions finish (the store may group-commit them)

    again = run_caption_stage(iter(_tasks(decoded)), captioner="local", store=store, n_videos=N_VIDEOS,
                              progress=False)
    assert again["cached"] == N_VIDEOS * len(PROMPTS) and again["captioned"] == 0
    assert len(store.segments()) == segments  # nothing redone, nothing written


def test_dead_caption_actor_is_restarted_and_its_videos_retried(decoded, tmp_path, ray_local, monkeypatch):
    marker = tmp_path / "exit-once"
    marker.write_text("the first caption call that sees this file kills its process")
    monkeypatch.setenv("CAPEVAL_KILL_AT", "caption_call")  # handed to the caption actors (engine/faultpoints.py)
    monkeypatch.setenv("CAPEVAL_KILL_ONCE", str(marker))
    store = SegmentStore(tmp_path / "captions", CAPTIONS)
    stats = run_caption_stage(iter(_tasks(decoded)), captioner="local", store=store, n_videos=N_VIDEOS,
                              progress=False, max_restarts=2)
    assert not marker.exists()  # an actor really reached the kill point
    assert stats["actor_deaths"] >= 1 and stats["retried"] >= 1
    assert stats["failed"] == 0 and stats["captioned"] == N_VIDEOS * len(PROMPTS)
    table = read_captions(store)
    got = dict(zip(table.column("caption_key").to_pylist(), table.column("text").to_pylist()))
    assert got == _expected(decoded)  # every video of the lost batches captioned, once, correctly
    assert table.num_rows == len(set(table.column("caption_key").to_pylist()))


def test_segmental_prompt_conditions_each_segment_on_the_previous(decoded, tmp_path, ray_local):
    r = decoded[0]
    p = get_prompt("lvcap_segment")
    task = CaptionTask(caption_key(r["frames_key"], "local", "pixelstats-1", p.text, {"segments": 2}), r["video_id"],
                       r["path"], tuple(r["timestamps"]), r["frame_spec"], p.id, p.text, segments=2)
    store = SegmentStore(tmp_path / "captions", CAPTIONS)
    run_caption_stage(iter([task]), captioner="local", store=store, progress=False)
    (text,) = read_captions(store).column("text").to_pylist()
    frames = load_frames(r["path"])
    first = describe(frames[:2], p.text)
    context = f"Captions of the previous segments of this video:\nSegment 1: {first}"
    second = describe(frames[2:], p.text, context=context)  # the context travels once, in its own field
    assert text == f"Segment 1: {first}\nSegment 2: {second}"
    assert second.startswith("Continuing from the previous segment")


def test_segment_chunks_follow_the_frame_spec_segments():
    from capeval.engine.stages.caption import segment_chunks

    # 60 s segments, 2 frames each: frames grouped by the segment their timestamp falls in
    assert segment_chunks("segments:length=60,per=2", 6, 4, (15.0, 45.0, 75.0, 105.0, 130.0, 140.0)) == \
        [[0, 1], [2, 3], [4, 5]]
    # scene cuts at 12.5 s and 40 s
    assert segment_chunks("segments:at=12.5|40,per=2", 6, 4, (3.0, 9.0, 20.0, 33.0, 45.0, 55.0)) == \
        [[0, 1], [2, 3], [4, 5]]
    # a frame the decoder could not return shifts nothing: grouping is by timestamp, not by count
    assert segment_chunks("segments:length=60,per=2", 5, 4, (15.0, 45.0, 75.0, 130.0, 140.0)) == \
        [[0, 1], [2], [3, 4]]
    # any other spec: equal parts
    assert segment_chunks("uniform:8", 8, 4) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_segmental_requests_carry_the_previous_captions_once():
    """Each segment's request: the prompt text as written, the earlier captions only in `context` (which the
    OpenAI-compatible and vLLM captioners put before the prompt once)."""
    worker = worker_around(RecordingCaptioner())
    p = get_prompt("lvcap_segment")
    frames = np.zeros((6, 8, 8, 3), np.uint8)
    task = CaptionTask("k", "v", "unused.npy", (15.0, 45.0, 75.0, 105.0, 130.0, 140.0),
                       "segments:length=60,per=2", p.id, p.text, segments=4)
    row = worker._segmental(task, frames)
    reqs = worker.model.requests
    assert [len(r.frames) for r in reqs] == [2, 2, 2]
    assert all(r.prompt == p.text for r in reqs)
    assert reqs[0].context is None and reqs[2].context.count("Segment 1: part 1") == 1
    assert row["text"] == "Segment 1: part 1\nSegment 2: part 2\nSegment 3: part 3"


def test_truncation_and_frame_caps_are_recorded_in_the_caption_row(tmp_path):
    """A caption cut at max_tokens and a backend that received fewer frames than the spec say so in their row."""
    from capeval.adapters.base import CaptionResponse

    class Capped:
        def caption(self, requests):
            return [CaptionResponse(r.key, "a cut capt", n_tokens=r.max_tokens, truncated=True,
                                    frames_sent=min(2, len(r.frames))) for r in requests]

    worker = worker_around(Capped(), "capped")
    path = tmp_path / "f.npy"
    np.save(path, np.zeros((6, 8, 8, 3), np.uint8))
    p = get_prompt("brief")
    (row,) = worker.caption([CaptionTask("k", "v", str(path), (0.5, 1.5, 2.5, 3.5, 4.5, 5.5), "uniform:6", p.id,
                                         p.text, max_tokens=16)])
    assert (row["truncated"], row["frames_sent"], row["n_tokens"]) == (True, 2, 16)
    store = SegmentStore(tmp_path / "captions", CAPTIONS)
    store.append(__import__("pyarrow").Table.from_pylist([row], schema=CAPTIONS))
    assert read_captions(store).select(["truncated", "frames_sent"]).to_pylist() == [
        {"truncated": True, "frames_sent": 2}]
