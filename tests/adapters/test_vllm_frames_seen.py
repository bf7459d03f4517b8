"""The vLLM captioner's frames-seen report on vLLM's CPU engine (each tiny random-weight family): the metadata and
kwargs it gave the processor, and a visual-token count equal to the family's own arithmetic (tests/_frames_seen.py),
reaching the caption row's ledger."""

from __future__ import annotations

import pytest

from capeval.adapters.checkpoints import model_cache
from _frames_seen import EXPECTED_TOKENS
from capeval.testing.random_vlm_families import FAMILIES, build_tiny_vlm

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_vllm_reports_the_visual_tokens_its_processor_made(family, tmp_path):
    from _fixtures_vllm import small_kv_cache

    from capeval.adapters.base import CaptionRequest
    from capeval.adapters.vllm_captioner import VLLMCaptioner
    from capeval.engine.datasets.synthetic_videos import make_video
    from capeval.engine.frames.decode import decode_frames
    from capeval.engine.frames.ledger import frames_seen
    from capeval.engine.frames.sampling import FrameSpec

    d = build_tiny_vlm(family, model_cache() / f"tiny-{family.replace('_', '-')}")
    path = tmp_path / "clip.mp4"
    make_video(path, codec="h264", seconds=2.0, fps=12, size=(160, 120), seed=5)
    r = decode_frames(path, FrameSpec.parse("vllm:4"))
    with small_kv_cache() as kv:
        cap = VLLMCaptioner(str(d), max_model_len=1024, max_num_seqs=2, max_num_batched_tokens=1024,
                            skip_mm_profiling=True, seed=0, **kv)  # fmt: skip
    try:
        (resp,) = cap.caption([CaptionRequest("k", "Describe the video.", r.frames, tuple(r.timestamps),
                                              max_tokens=2)])
    finally:
        cap.close()
    assert resp.error is None, resp.error
    report = resp.processor_inputs
    n, h, w = r.frames.shape[:3]
    assert report["backend"] == "vllm" and report["sent_as"] == "video"
    assert report["processor_kwargs"] == {"do_sample_frames": False}
    assert report["metadata"]["frames_indices"] == [round(1000 * t) for t in r.timestamps]
    assert report["visual_tokens"] == EXPECTED_TOKENS[family](d, n, h, w)
    ledger = frames_seen(r.frames, r.timestamps, "vllm:4", meta=r.info, processor=report)
    assert ledger["processor"]["visual_tokens"] == report["visual_tokens"] and ledger["indices"] == [0, 7, 15, 23]
