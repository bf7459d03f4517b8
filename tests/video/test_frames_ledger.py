"""The frames-seen ledger (engine/frames/ledger.py): every caption row records what its model was given -- decoder
and version, frame indices and timestamps, frame size, a pixel digest and what the backend handed its processor --
as additive data: no key changes, and rows without it read back as null."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from _caption_worker import RecordingCaptioner, worker_around

from capeval.adapters.base import CaptionRequest, CaptionResponse
from capeval.adapters.openai_http import OpenAICaptioner
from capeval.adapters.vllm_captioner import processor_report
from capeval.adapters.vlm_video_inputs import video_input
from capeval.engine import schemas
from capeval.engine.datasets.synthetic_videos import make_video
from capeval.engine.frames import FrameSpec, cache
from capeval.engine.frames.ledger import compare_ledgers, frame_digests, frames_seen, read_ledger
from capeval.engine.stages.caption import CaptionTask, read_captions
from capeval.engine.store.segments import SegmentStore


def _frames(n=4, h=6, w=8, seed=0):
    return np.random.default_rng(seed).integers(0, 255, (n, h, w, 3), dtype=np.uint8)


def test_ledger_records_indices_from_the_rate_and_a_digest_of_the_pixels():
    frames = _frames()
    meta = {"rate": 25.0, "decoder": "pyav", "decoder_version": "av 1.0"}
    led = frames_seen(frames, [0.0, 0.4, 0.8, 1.2], "linspace:4", meta=meta)
    assert led["indices"] == [0, 10, 20, 30] and led["timestamps"] == [0.0, 0.4, 0.8, 1.2]
    assert led["frame_size"] == "8x6" and led["n_frames"] == 4 and led["decoder_version"] == "av 1.0"
    assert led["frame_digests"][1] == hashlib.sha256(frames[1].tobytes()).hexdigest()[:16]
    assert frames_seen(frames.copy(), [0.0, 0.4, 0.8, 1.2], "linspace:4", meta=meta)["digest"] == led["digest"]
    changed = frames.copy()
    changed[2, 0, 0, 0] ^= 1  # one value of one frame
    other = frames_seen(changed, [0.0, 0.4, 0.8, 1.2], "linspace:4", meta=meta)
    assert other["digest"] != led["digest"]
    cmp = compare_ledgers(led, other)
    assert cmp["status"] == "differ" and cmp["positions"] == [2] and cmp["reasons"] == [
        "pixels (same frames, sizes and decoder)"]
    assert frames_seen(frames, [0, 1, 2, 3], "uniform:4")["indices"] is None  # no rate recorded: no indices


def test_frames_a_backend_left_out_are_not_in_the_ledger():
    frames = _frames(6)
    led = frames_seen(frames, [0, 1, 2, 3, 4, 5], "uniform:6", meta={"rate": 1.0},
                      processor={"backend": "x", "frames_sent": [0, 2, 5], "visual_tokens": 42})
    assert led["frames_sent"] == [0, 2, 5] and led["indices"] == [0, 2, 5] and led["n_frames"] == 3
    assert led["frame_digests"] == frames_seen(frames[[0, 2, 5]], [0, 2, 5], "uniform:6")["frame_digests"]
    assert led["processor"] == {"backend": "x", "visual_tokens": 42}


def test_digests_taken_before_the_answer_give_the_same_ledger():
    frames = _frames(6)
    full = frame_digests(frames)
    assert full[3] == hashlib.sha256(frames[3].tobytes()).hexdigest()
    for processor in (None, {"frames_sent": [0, 2, 5]}):
        args = (frames, [0, 1, 2, 3, 4, 5], "uniform:6")
        assert frames_seen(*args, meta={"rate": 1.0}, processor=processor, digests=full) == frames_seen(
            *args, meta={"rate": 1.0}, processor=processor)


def test_compare_says_identical_differ_or_unknown():
    a = frames_seen(_frames(), [0, 1, 2, 3], "uniform:4", meta={"rate": 1.0})
    b = frames_seen(_frames(seed=1)[:3], [0, 2, 3], "vllm:3", meta={"rate": 1.0})
    assert compare_ledgers(a, dict(a))["status"] == "identical"
    d = compare_ledgers(a, b)
    assert d["status"] == "differ" and d["by"] == "indices" and d["only_a"] == [1] and d["only_b"] == []
    assert "frame count" in d["reasons"] and "positions" not in d
    assert compare_ledgers(a, None)["status"] == "unknown"


def test_the_frame_cache_records_the_decoder_and_rate(tmp_path):
    path = tmp_path / "v.mp4"
    make_video(path, codec="libx264", seconds=1.0, fps=10, size=(64, 48), seed=1)
    row = cache.frames_row(path, "v", FrameSpec.parse("vllm:4"), None, tmp_path / "fc")
    meta = cache.frames_meta(row["path"])
    assert meta["rate"] == 10.0 and meta["decoder"] == "pyav" and meta["decoder_version"].startswith("av ")
    assert "libavcodec" in meta["decoder_version"]
    assert cache.frames_meta(str(tmp_path / "old.npy")) is None  # an older cache's frames: nothing recorded


def test_a_caption_row_records_what_the_captioner_was_given(tmp_path):
    path = tmp_path / "v.mp4"
    make_video(path, codec="libx264", seconds=1.0, fps=10, size=(64, 48), seed=1)
    row = cache.frames_row(path, "v", FrameSpec.parse("vllm:4"), None, tmp_path / "fc")
    task = CaptionTask("k1", "v", row["path"], tuple(row["timestamps"]), "vllm:4", "brief", "Describe.")
    worker = worker_around(RecordingCaptioner())
    out = worker.caption([task])[0]
    led = read_ledger(out["frames_seen"])
    assert led["indices"] == [0, 3, 6, 9] and led["frame_spec"] == "vllm:4" and led["rate"] == 10.0
    given = worker.model.requests[0].frames
    assert led["digest"] == frames_seen(given, row["timestamps"], "vllm:4")["digest"]
    assert led["frame_size"] == f"{given.shape[2]}x{given.shape[1]}" and "processor" not in led
    # the async path and the segmental path record it too
    import asyncio

    again = asyncio.run(worker_around(RecordingCaptioner()).caption_one(task))
    assert read_ledger(again["frames_seen"])["digest"] == led["digest"]
    seg = CaptionTask("k2", "v", row["path"], tuple(row["timestamps"]), "vllm:4", "brief", "Describe.", segments=2)
    seg_row = worker_around(RecordingCaptioner()).caption([seg])[0]
    seg_led = read_ledger(seg_row["frames_seen"])
    assert seg_led["digest"] == led["digest"] and [s["frames"] for s in seg_led["processor"]["segments"]] == [
        [0, 1], [2, 3]]


def test_a_backends_processor_report_reaches_the_row(tmp_path):
    path = tmp_path / "v.mp4"
    make_video(path, codec="libx264", seconds=1.0, fps=10, size=(64, 48), seed=1)
    row = cache.frames_row(path, "v", FrameSpec.parse("uniform:4"), None, tmp_path / "fc")

    class Reporting:
        def caption(self, requests):
            return [CaptionResponse(r.key, "ok", processor_inputs={"backend": "t", "visual_tokens": 7,
                                                                  "processed_size": "56x42"}) for r in requests]

    task = CaptionTask("k", "v", row["path"], tuple(row["timestamps"]), "uniform:4", "brief", "Describe.")
    led = read_ledger(worker_around(Reporting()).caption([task])[0]["frames_seen"])
    assert led["processor"] == {"backend": "t", "visual_tokens": 7, "processed_size": "56x42"}


def test_vllm_reports_the_metadata_kwargs_and_visual_tokens_it_gave_the_processor():
    frames = _frames(4)
    mm, kw = video_input(frames, (0.5, 1.5, 2.5, 3.5))
    out = SimpleNamespace(prompt_token_ids=[1, 2] + [77] * 96 + [3])
    report = processor_report({"prompt": "p", "multi_modal_data": mm, "mm_processor_kwargs": kw}, out,
                              {"video": 77, "image": 78})
    assert report["backend"] == "vllm" and report["sent_as"] == "video" and report["visual_tokens"] == 96
    assert report["metadata"]["frames_indices"] == [500, 1500, 2500, 3500] and report["processor_kwargs"] == {
        "do_sample_frames": False}
    assert json.loads(json.dumps(report))  # JSON-able as it is stored
    assert "visual_tokens" not in processor_report({"multi_modal_data": mm}, out)  # no placeholder token known


def test_openai_reports_which_frames_it_sent_when_a_cap_drops_some():
    cap = OpenAICaptioner(model="m", base_url="http://127.0.0.1:9/v1", api_key="x", max_frames=3)
    req = CaptionRequest("k", "p", _frames(6), (0, 1, 2, 3, 4, 5))
    report = cap.processor_inputs(req)
    assert report["backend"] == "openai-http" and report["frames_sent"] == [0, 2, 5]
    assert "frames_sent" not in cap.processor_inputs(CaptionRequest("k", "p", _frames(3), (0, 1, 2)))
    cap.close()


def test_rows_stored_before_the_ledger_read_back_with_a_null_one(tmp_path):
    old_schema = pa.schema([f for f in schemas.CAPTIONS if f.name != "frames_seen"])
    store = SegmentStore(tmp_path / "captions")
    store.append(pa.Table.from_pylist([{"caption_key": "k", "captioner": "c", "prompt_id": "p", "frame_spec": "uniform:2",
                                        "video_id": "v", "text": "t"}], schema=old_schema))
    store.flush()
    got = read_captions(SegmentStore(tmp_path / "captions", schemas.CAPTIONS))
    assert got.column("frames_seen").to_pylist() == [None] and got.column("caption_key").to_pylist() == ["k"]
