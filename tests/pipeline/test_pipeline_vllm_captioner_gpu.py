"""The vLLM captioner on a GPU: a small real VLM captions real decoded frames. Skipped without CUDA."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.vllm,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MODEL = os.environ.get("CAPEVAL_GPU_VLM", "Qwen/Qwen2-VL-2B-Instruct")


def test_vllm_captioner_captions_video_frames(tmp_path):
    from adapters.base import CaptionRequest
    from adapters.vllm_captioner import VLLMCaptioner
    from engine.datasets.synthetic_videos import make_video
    from engine.frames.decode import decode_frames

    path = tmp_path / "v.mp4"
    truth = make_video(path, codec="h264", seconds=2.0, size=(320, 240), seed=3)
    frames = decode_frames(path, "uniform:8").frames
    cap = VLLMCaptioner(MODEL, max_model_len=8192, gpu_memory_utilization=0.5)
    try:
        good = CaptionRequest("k1", "Describe this video in detail.", frames, max_tokens=64)
        bad = CaptionRequest("k2", "Describe this video.", frames[:, :, :, :1], max_tokens=8)  # 1 channel: invalid
        r1, r2 = cap.caption([good, bad])
        assert r1.key == "k1" and r1.error is None and r1.text and r1.n_tokens > 0 and r1.prompt_tokens > 0
        assert r2.key == "k2" and (r2.text is None) == (r2.error is not None)
        assert truth["background"]  # ground truth exists for a human to compare: r1.text is printed below
        print(r1.text)
    finally:
        cap.close()
