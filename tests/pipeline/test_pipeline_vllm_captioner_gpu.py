"""The vLLM captioner on a GPU: a real Qwen2.5-VL captions real decoded frames sent as one video WITH metadata (the
path Qwen2.5-VL requires), streamed through `acaption`, and sees exactly the frames the spec chose. Skipped without
CUDA. CAPEVAL_GPU_VLM names another model of the Qwen2/2.5/3-VL families (a hub id or a local folder)."""

from __future__ import annotations

import asyncio
import math
import os

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.vllm,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MODEL = os.environ.get("CAPEVAL_GPU_VLM", "Qwen/Qwen2.5-VL-3B-Instruct")


def test_vllm_captioner_streams_video_with_metadata(tmp_path):
    from capeval.adapters.base import CaptionRequest
    from capeval.adapters.vllm_captioner import VLLMCaptioner
    from capeval.engine.datasets.synthetic_videos import make_video
    from capeval.engine.frames.decode import decode_frames
    from capeval.engine.frames.sampling import FrameSpec

    path = tmp_path / "v.mp4"
    truth = make_video(path, codec="h264", seconds=2.0, size=(320, 240), seed=3)
    clips = {spec: decode_frames(path, FrameSpec.parse(spec)) for spec in ("uniform:8", "uniform:5")}
    cap = VLLMCaptioner(MODEL, max_model_len=8192, gpu_memory_utilization=0.5)
    seen: dict[str, list[int]] = {}
    cap.on_output = lambda req, out: seen.__setitem__(req.key, list(out.prompt_token_ids))
    try:
        assert cap.frame_input == "video"
        reqs = [CaptionRequest(spec, "Describe this video in detail.", r.frames, tuple(r.timestamps), max_tokens=64)
                for spec, r in clips.items()]  # fmt: skip
        bad = CaptionRequest("bad", "Describe this video.", clips["uniform:8"].frames[:, :, :, :1], max_tokens=8)

        async def stream():
            return await asyncio.gather(*(cap.acaption(r) for r in reqs + [bad]))

        *good, worse = asyncio.run(stream())
        assert worse.key == "bad" and worse.text is None and "uint8" in worse.error
        vp = cap.processor.video_processor
        video_pad = cap.processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
        for r, resp in zip(reqs, good):
            assert resp.error is None and resp.text and resp.n_tokens > 0, resp.error
            # the processor's own grid for exactly these frames (no sampling): T = ceil(n / 2) temporal patches
            grid = vp(videos=[r.frames], do_sample_frames=False, return_tensors="pt")["video_grid_thw"][0].tolist()
            assert grid[0] == math.ceil(len(r.frames) / vp.temporal_patch_size)
            assert seen[r.key].count(video_pad) == grid[0] * grid[1] * grid[2] // vp.merge_size**2
            print(r.key, resp.text)
        assert truth["background"]  # ground truth exists for a human to compare with the printed captions
    finally:
        cap.close()
