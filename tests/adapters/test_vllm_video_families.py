"""Each VLM family end to end on vLLM's CPU engine through VLLMCaptioner: a real H.264 video made here, decoded with
frame specs, captioned as one video (frames + metadata, adapters/vlm_video_inputs.py), and the processed prompt
holds exactly the video placeholder tokens of the frames the spec chose -- computed here from the family's own
config and processor settings (tests/_frames_seen.py), not read back from the engine.

One engine per family (tiny random-weight checkpoints, engine/root/testing/random_vlm_families.py, built once into the suite's
model cache), small frames and few of them: these tests cost engine start-up, little else.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from capeval.adapters.checkpoints import model_cache
from _frames_seen import EXPECTED_TOKENS, VIDEO_TOKEN, qwen3_timestamps
from capeval.testing.random_vlm_families import FAMILIES, build_tiny_vlm

pytestmark = pytest.mark.vllm

SPECS = ("uniform:4", "linspace:3")  # an even and an odd count (Qwen pads odd counts with the last frame)
VIDEO_SECONDS, VIDEO_FPS = 2.0, 12


def _model_dir(family: str):
    return build_tiny_vlm(family, model_cache() / f"tiny-{family.replace('_', '-')}")


@pytest.fixture(scope="module")
def decoded(tmp_path_factory) -> dict:
    """{frame spec: FramesResult} of one real H.264 clip (160x120, 2 s at 12 fps)."""
    from capeval.engine.datasets.synthetic_videos import make_video
    from capeval.engine.frames.decode import decode_frames
    from capeval.engine.frames.sampling import FrameSpec

    path = tmp_path_factory.mktemp("family-video") / "clip.mp4"
    make_video(path, codec="h264", seconds=VIDEO_SECONDS, fps=VIDEO_FPS, size=(160, 120), seed=5)
    return {spec: decode_frames(path, FrameSpec.parse(spec)) for spec in SPECS}


# ---- the tests ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_sees_exactly_the_frames_the_spec_chose(family, decoded):
    from capeval.adapters.base import CaptionRequest, StreamingCaptioner
    from capeval.adapters.vllm_captioner import VLLMCaptioner

    assert family in EXPECTED_TOKENS, f"no frames-seen arithmetic for family {family!r}: add it to tests/_frames_seen.py"
    d = _model_dir(family)
    t0 = time.perf_counter()
    from _fixtures_vllm import small_kv_cache

    with small_kv_cache() as kv:
        cap = VLLMCaptioner(str(d), max_model_len=1024, max_num_seqs=4, max_num_batched_tokens=1024,
                            skip_mm_profiling=True, seed=0, **kv)  # fmt: skip
    seen: dict[str, list[int]] = {}
    cap.on_output = lambda req, out: seen.__setitem__(req.key, list(out.prompt_token_ids))
    try:
        assert isinstance(cap, StreamingCaptioner) and cap.frame_input == "video"
        reqs = [CaptionRequest(spec, "Describe the video.", r.frames, tuple(r.timestamps), max_tokens=4)
                for spec, r in decoded.items()]  # fmt: skip

        async def stream():
            return await asyncio.gather(*(cap.acaption(r) for r in reqs))

        out = asyncio.run(stream())
    finally:
        cap.close()
    print(f"{family}: engine start + 2 captions {time.perf_counter() - t0:.1f} s")
    tok = cap.processor.tokenizer
    video_id = tok.convert_tokens_to_ids(VIDEO_TOKEN[family])
    for r, resp in zip(reqs, out):
        assert resp.error is None and resp.n_tokens >= 1, (family, r.key, resp.error)
        n, h, w = r.frames.shape[:3]
        assert len(decoded[r.key].frames) == n and n == int(r.key.split(":")[1])
        expected = EXPECTED_TOKENS[family](d, n, h, w)
        assert seen[r.key].count(video_id) == expected, (family, r.key, n)
        assert resp.prompt_tokens == len(seen[r.key])
        if family == "qwen3_vl":  # the metadata's timing reached the prompt: real seconds of the chosen frames
            prompt = tok.decode(seen[r.key])
            for stamp in qwen3_timestamps(r.timestamps):
                assert stamp in prompt, (stamp, prompt)


def test_metadata_is_consistent_with_the_frame_timestamps():
    from transformers.video_utils import VideoMetadata

    from capeval.adapters.vlm_video_inputs import video_metadata

    ts = (0.25, 0.75, 1.25, 1.75)  # uniform:4 of a 2 s clip
    meta = video_metadata(4, ts)
    vm = VideoMetadata(**{k: v for k, v in meta.items() if k != "do_sample_frames"})
    assert meta["do_sample_frames"] is False
    assert np.allclose(vm.timestamps, ts)  # Qwen3-VL / GLM-4.1V: frames_indices / fps
    assert vm.sampled_fps == pytest.approx(2.0)  # Qwen2.5-VL: seconds per temporal patch = 2 / sampled_fps
    assert vm.duration == pytest.approx(2.0)
    # frames closer than the clock's 1 ms, and no timing at all, still give one increasing index per frame
    assert video_metadata(3, (1.0, 1.0, 1.0004))["frames_indices"] == [1000, 1001, 1002]
    assert video_metadata(2)["frames_indices"] == [0, 1000]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_caption_only_sweep_through_each_family(family, tmp_path, ray_local, capsys):
    """The sweep path (decode -> frame cache -> caption actor on Ray -> captions.parquet) through each family: every
    real H.264 video captioned, and each caption's prompt holds the spec's frames' video tokens (
    Qwen2/2.5-VL: the rendered prompt with its one video placeholder expanded to exactly 4 frames' tokens, no more, no
    fewer; the others: those tokens besides the text plus their per-frame wrappers or time stamps, which the direct
    family test above counts exactly)."""
    import polars as pl
    from transformers import AutoProcessor

    from capeval.engine.cli import main as cli_main
    from capeval.engine.datasets.synthetic_videos import make_video
    from capeval.engine.schemas import CAPTIONS
    from capeval.engine.store.segments import SegmentStore

    spec, text = "uniform:4", "Describe the video."
    d = _model_dir(family)
    clips = tmp_path / "clips"
    clips.mkdir()
    for i in range(2):
        make_video(clips / f"clip{i}.mp4", codec="h264", seconds=VIDEO_SECONDS, fps=VIDEO_FPS, size=(160, 120),
                   seed=20 + i)  # fmt: skip
    sweep = tmp_path / "caponly.toml"
    sweep.write_text(
        f'name = "caponly-{family}"\nframes = ["{spec}"]\n\n[[prompts]]\nid = "p"\ntext = "{text}"\n\n'
        f'[[datasets]]\nname = "clips"\nkind = "videos"\npath = "{clips}"\n\n'
        f'[[captioners]]\nname = "vllm"\nlabel = "{family}"\nframe_size = "native"\n'
        f'params = {{ model = "{d}", max_model_len = 1024, max_num_seqs = 4, max_num_batched_tokens = 1024, '
        f'skip_mm_profiling = true, seed = 0 }}\n')  # fmt: skip
    out = tmp_path / "out"
    code = cli_main(["sweep", str(sweep), "--out", str(out), "--no-progress"])
    printed = capsys.readouterr()
    assert code == 0, printed.err[-3000:]
    captions = pl.read_parquet(out / "captions.parquet")
    assert captions.height == 2 and set(captions["item_status"]) == {"ok"}, captions
    proc = AutoProcessor.from_pretrained(d)
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": text}]}]
    n_text = len(proc.tokenizer(proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False))
                 ["input_ids"])  # fmt: skip
    # the one video placeholder becomes the frames' tokens
    expected = n_text - 1 + EXPECTED_TOKENS[family](d, 4, 120, 160)
    stored = SegmentStore(out / "captions", CAPTIONS).read(columns=["prompt_tokens", "error"])  # the caption rows
    assert stored.column("error").to_pylist() == [None, None]
    if family in ("qwen2_vl", "qwen2_5_vl"):
        assert stored.column("prompt_tokens").to_pylist() == [expected, expected]
    else:
        assert all(t >= expected for t in stored.column("prompt_tokens").to_pylist()), (family, expected)
