"""The transformers captioner (adapters/transformers_captioner.py) on each tiny VLM family, on CPU: the model sees
exactly the frames the frame spec chose (the vLLM tests' frames-seen arithmetic, tests/_frames_seen.py, counted in
the token ids handed to `generate`), queued requests are generated in batches, a bad request fails alone, and for
the same request the transformers and vLLM captioners hand the family's processor the same prompt, frames and
metadata (the processed pixel values, grids and prompt token ids compared; vLLM's own processor, no engine), and a
caption-only sweep through the registered `transformers` captioner runs for each family with the frames-seen count.

Tiny random-weight checkpoints (capeval.testing.random_vlm_families, built once into the suite's model cache), a
2 s clip, 3-4 frames, 4 new tokens: a family costs a few seconds.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from _frames_seen import EXPECTED_TOKENS, VIDEO_TOKEN, qwen3_timestamps
from capeval.adapters.base import CaptionRequest
from capeval.adapters.checkpoints import model_cache
from capeval.testing.random_vlm_families import FAMILIES, build_tiny_vlm

SPECS = ("uniform:4", "linspace:3")  # an even and an odd count (Qwen pads odd counts with the last frame)
VIDEO_SECONDS, VIDEO_FPS = 2.0, 12
# transformers' InternVL expands a video into per-frame image blocks of its image token; the others as in vLLM
HF_VIDEO_TOKEN = {**VIDEO_TOKEN, "internvl3": "<IMG_CONTEXT>"}
# (family, vLLM's name of a processed video tensor) -> transformers' name of it, where they differ
HF_NAME = {("internvl3", "pixel_values_videos"): "pixel_values"}


def _model_dir(family: str):
    return build_tiny_vlm(family, model_cache() / f"tiny-{family.replace('_', '-')}")


def _captioner(family: str, **params):
    from capeval.adapters.transformers_captioner import TransformersCaptioner

    return TransformersCaptioner(str(_model_dir(family)), dtype="float32", **params)


@pytest.fixture(scope="module")
def decoded(tmp_path_factory) -> dict:
    """{frame spec: FramesResult} of one real H.264 clip (160x120, 2 s at 12 fps)."""
    from capeval.engine.datasets.synthetic_videos import make_video
    from capeval.engine.frames.decode import decode_frames
    from capeval.engine.frames.sampling import FrameSpec

    path = tmp_path_factory.mktemp("hf-family-video") / "clip.mp4"
    make_video(path, codec="h264", seconds=VIDEO_SECONDS, fps=VIDEO_FPS, size=(160, 120), seed=5)
    return {spec: decode_frames(path, FrameSpec.parse(spec)) for spec in SPECS}


def _requests(decoded: dict, text: str = "Describe the video.") -> list[CaptionRequest]:
    return [CaptionRequest(spec, text, r.frames, tuple(r.timestamps), max_tokens=4) for spec, r in decoded.items()]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_sees_exactly_the_frames_the_spec_chose(family, decoded):
    from capeval.adapters.base import StreamingCaptioner

    cap = _captioner(family)
    seen: dict[str, list[int]] = {}
    cap.on_inputs = lambda req, ids: seen.__setitem__(req.key, ids)
    reqs = _requests(decoded)
    try:
        assert isinstance(cap, StreamingCaptioner) and cap.frame_input == "video"

        async def stream():
            return await asyncio.gather(*(cap.acaption(r) for r in reqs))

        out = asyncio.run(stream())
    finally:
        cap.close()
    tok = cap.tokenizer
    video_id = tok.convert_tokens_to_ids(HF_VIDEO_TOKEN[family])
    d = _model_dir(family)
    for r, resp in zip(reqs, out):
        assert resp.error is None and 1 <= resp.n_tokens <= 4, (family, r.key, resp.error)
        n, h, w = r.frames.shape[:3]
        assert len(decoded[r.key].frames) == n and n == int(r.key.split(":")[1])
        assert seen[r.key].count(video_id) == EXPECTED_TOKENS[family](d, n, h, w), (family, r.key, n)
        assert resp.prompt_tokens == len(seen[r.key])
        # the frames-seen ledger's report: what the processor was given and what it made of it
        report = resp.processor_inputs
        assert report["backend"] == "transformers" and report["sent_as"] == "video"
        assert report["visual_tokens"] == EXPECTED_TOKENS[family](d, n, h, w)
        assert report["processor_kwargs"] == {"do_sample_frames": False}
        assert report["metadata"]["frames_indices"] == [round(1000 * t) for t in r.timestamps]
        meta = report["metadata"]
        assert meta["fps"] == 1000.0 and (meta["width"], meta["height"]) == (w, h)
        pw, ph = (int(v) for v in report["processed_size"].split("x"))
        assert pw > 0 and ph > 0
        if family in ("qwen2_vl", "qwen2_5_vl"):  # tokens = temporal patches x patch grid / merge^2
            patch = cap.processor.video_processor.patch_size
            assert (n + 1) // 2 * (pw // patch) * (ph // patch) // 4 == report["visual_tokens"]
        if family == "qwen3_vl":  # the metadata's timing reached the prompt: real seconds of the chosen frames
            prompt = tok.decode(seen[r.key])
            for stamp in qwen3_timestamps(r.timestamps):
                assert stamp in prompt, (stamp, prompt)


def test_queued_requests_share_a_generate_call_and_a_bad_one_fails_alone(decoded):
    """Requests queued together with the same frame geometry go through one `generate` (left-padded batch); their
    captions are the ones each gets alone (greedy); frames of another shape go in their own batch; a request with
    unusable frames fails with an error while the others are captioned."""
    cap = _captioner("qwen2_vl", max_batch=8)
    calls: list[int] = []
    generate = cap.model.generate
    cap.model.generate = lambda **kw: calls.append(len(kw["input_ids"])) or generate(**kw)
    four = decoded["uniform:4"]
    reqs = [CaptionRequest(f"u{i}", ("Describe the video.", "What happens?", "Say it briefly.")[i], four.frames,
                           tuple(four.timestamps), max_tokens=4) for i in range(3)]  # fmt: skip
    three = decoded["linspace:3"]
    reqs.append(CaptionRequest("l", "Describe the video.", three.frames, tuple(three.timestamps), max_tokens=4))
    bad = CaptionRequest("bad", "Describe the video.", np.zeros((2, 8, 8), np.uint8), max_tokens=4)
    try:
        together = cap.caption(reqs + [bad])
        alone = [cap.caption([r])[0] for r in reqs]
    finally:
        cap.close()
    assert together[-1].text is None and "frames must be uint8 (T, H, W, 3)" in together[-1].error
    assert calls == [3, 1] + [1] * len(reqs), calls  # then each alone
    assert [r.text for r in together[:-1]] == [r.text for r in alone]
    assert all(r.error is None for r in together[:-1])


def test_a_sampled_caption_depends_only_on_its_seed(decoded):
    """temperature > 0: the same request and seed give the same caption whether queued with others or alone."""
    cap = _captioner("qwen2_vl")
    four = decoded["uniform:4"]
    reqs = [CaptionRequest(f"s{i}", "Describe the video.", four.frames, tuple(four.timestamps), max_tokens=6,
                           temperature=1.0, seed=7) for i in range(2)]  # fmt: skip
    try:
        together = cap.caption(reqs)
        alone = cap.caption(reqs[:1])
    finally:
        cap.close()
    assert together[0].error is None and together[0].text == together[1].text == alone[0].text


def test_params_are_declared_and_bad_values_fail_at_start():
    from capeval.adapters.transformers_captioner import TransformersCaptioner
    from capeval.engine.reasoning import ReasoningTagsError

    declared = {p.name for p in TransformersCaptioner.params}
    assert {"model", "dtype", "device_map", "model_class", "max_batch", "max_in_flight", "reasoning_tags"} <= declared
    with pytest.raises(ReasoningTagsError):
        _captioner("qwen2_vl", reasoning_tags="<think>")
    with pytest.raises(ValueError, match="not a transformers class"):
        _captioner("qwen2_vl", model_class="NoSuchModelForAnything")
    import torch

    from capeval.engine.reasoning import tags_of

    cap = TransformersCaptioner(str(_model_dir("llava_onevision")), dtype="bfloat16", reasoning_tags="none")
    frames = np.random.default_rng(2).integers(0, 256, (2, 48, 64, 3), dtype=np.uint8)
    try:
        assert tags_of(cap) is None  # the caption stage keeps thinking text when told to
        assert str(cap.model.device) == "cpu" and cap.model.dtype == torch.bfloat16
        (out,) = cap.caption([CaptionRequest("bf16", "Describe.", frames, (0.5, 1.5), max_tokens=2)])
        assert out.error is None and out.n_tokens >= 1  # float32 pixels into bfloat16 weights
    finally:
        cap.close()


def test_a_model_without_a_video_processor_takes_the_frames_as_images(tiny_vlm_dir):
    """Idefics3 (no video processor): each frame one image of TOKENS_PER_IMAGE tokens; a still image is one image;
    more frames than max_frames fail alone."""
    from capeval.adapters.transformers_captioner import TransformersCaptioner
    from capeval.testing.random_vlm import IMAGE_TOKEN, TOKENS_PER_IMAGE

    cap = TransformersCaptioner(str(tiny_vlm_dir), dtype="float32", max_frames=3)
    seen: dict[str, list[int]] = {}
    cap.on_inputs = lambda req, ids: seen.__setitem__(req.key, ids)
    frames = np.random.default_rng(1).integers(0, 256, (3, 48, 64, 3), dtype=np.uint8)
    reqs = [CaptionRequest("three", "Describe.", frames, max_tokens=4),
            CaptionRequest("still", "Describe.", frames[:1], media_type="image", max_tokens=4),
            CaptionRequest("four", "Describe.", np.concatenate([frames, frames[:1]]), max_tokens=4)]  # fmt: skip
    try:
        assert cap.frame_input == "images"
        three, still, four = cap.caption(reqs)
    finally:
        cap.close()
    image_id = cap.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    assert three.error is None and seen["three"].count(image_id) == 3 * TOKENS_PER_IMAGE
    assert still.error is None and seen["still"].count(image_id) == TOKENS_PER_IMAGE
    assert three.processor_inputs["sent_as"] == "images"
    assert three.processor_inputs["visual_tokens"] == 3 * TOKENS_PER_IMAGE
    assert four.text is None and "max_frames=3" in four.error


# ---- the same processor inputs as the vLLM captioner ---------------------------------------------------------------
def _vllm_processed(family: str, inputs: dict):
    """vLLM's multimodal processor on the vLLM captioner's request dict, as its engine would run it (normalization
    on the host, so the pixel values compare with transformers'): (prompt token ids, {name: tensor} of the video)."""
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.processing import ProcessorInputs
    from vllm.multimodal.processing.context import TimingContext

    config = ModelConfig(model=str(_model_dir(family)), max_model_len=2048, mm_device_do_normalize=False,
                         limit_mm_per_prompt={"video": 1, "image": 1})  # fmt: skip
    processor = MULTIMODAL_REGISTRY.create_processor(config)
    tokenizer = processor.info.get_tokenizer()
    ids = tokenizer.encode(inputs["prompt"], add_special_tokens=False)
    items = processor.info.parse_mm_data(inputs["multi_modal_data"])
    out = processor.apply(ProcessorInputs(ids, items, hf_processor_mm_kwargs=inputs["mm_processor_kwargs"]),
                          TimingContext(enabled=False))  # fmt: skip
    (video,) = out["mm_kwargs"]["video"]
    placeholders = sum(r.get_num_embeds() if hasattr(r, "get_num_embeds") else r.length
                       for r in out["mm_placeholders"]["video"])  # fmt: skip
    return out["prompt_token_ids"], {name: elem.data for name, elem in video.items()}, placeholders


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_transformers_and_vllm_build_the_same_processor_inputs(family, decoded):
    import torch

    from capeval.adapters.vllm_captioner import VLLMCaptioner

    hf = _captioner(family)
    try:
        # the vLLM captioner's request dict needs only its processor settings, not an engine
        vllm_cap = VLLMCaptioner.__new__(VLLMCaptioner)
        vllm_cap.processor, vllm_cap.frame_input, vllm_cap.system, vllm_cap.max_frames = hf.processor, "video", None, 64
        vllm_cap.rendered_prompts = {}
        for r in _requests(decoded):
            inputs = vllm_cap.engine_inputs(r)
            prepared = hf.prepare(r)
            assert inputs["prompt"] == prepared.prompt  # the same chat template rendering
            features = hf.processor_inputs([prepared])
            ids, tensors, n_visual = _vllm_processed(family, inputs)
            hf_ids = features["input_ids"][0].tolist()
            assert n_visual == sum(hf_ids.count(t) for t in hf.visual_token_ids), (family, r.key)
            if family != "internvl3":  # vLLM's InternVL keeps <video> placeholders where transformers' writes frames
                assert ids == hf_ids, (family, r.key)
            assert tensors, family
            for name, value in tensors.items():
                if name == "video_token_id":  # vLLM's own placeholder id (InternVL), not a processor output
                    continue
                if name == "video_num_patches":  # InternVL: one tile per frame, never split
                    assert int(value) == len(r.frames), (family, r.key)
                    continue
                if name == "timestamps":  # Qwen3-VL: per temporal patch, the mean time of its two frames
                    assert [f"<{t:.1f} seconds>" for t in value] == qwen3_timestamps(r.timestamps), (family, r.key)
                    continue
                mine = features[HF_NAME.get((family, name), name)]
                mine = mine[0] if mine.dim() == value.dim() + 1 and mine.shape[0] == 1 else mine
                assert tuple(mine.shape) == tuple(value.shape), (family, r.key, name)
                # vLLM casts pixel values to the model's dtype; so does generate, on the model's side
                assert torch.equal(mine.to(value.dtype), value), (family, r.key, name)
    finally:
        hf.close()


# ---- a caption-only sweep per family --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_caption_only_sweep_through_each_family(family, tmp_path, ray_local, capsys):
    """The sweep path (decode -> frame cache -> caption actor on Ray -> captions.parquet) through the `transformers`
    captioner: every real H.264 video captioned, and each caption's prompt is exactly as long as the captioner's
    prompt for the spec's frames taken directly, whose video tokens are the frames-seen arithmetic's count (so the
    sweep's model saw exactly the 4 frames the spec chose)."""
    import polars as pl

    from capeval.engine.cli import main as cli_main
    from capeval.engine.datasets.synthetic_videos import make_video
    from capeval.engine.frames.decode import decode_frames
    from capeval.engine.frames.sampling import FrameSpec
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
        f'name = "hf-caponly-{family}"\nframes = ["{spec}"]\n\n[[prompts]]\nid = "p"\ntext = "{text}"\n\n'
        f'[[datasets]]\nname = "clips"\nkind = "videos"\npath = "{clips}"\n\n'
        f'[[captioners]]\nname = "transformers"\nlabel = "{family}"\nframe_size = "native"\nmax_tokens = 4\n'
        f'params = {{ model = "{d}", dtype = "float32" }}\n')  # fmt: skip
    out = tmp_path / "out"
    code = cli_main(["sweep", str(sweep), "--out", str(out), "--no-progress"])
    printed = capsys.readouterr()
    assert code == 0, printed.err[-3000:]
    captions = pl.read_parquet(out / "captions.parquet")
    assert captions.height == 2 and set(captions["item_status"]) == {"ok"}, captions
    stored = SegmentStore(out / "captions", CAPTIONS).read(columns=["prompt_tokens", "error", "n_tokens",
                                                                    "frames_seen"])  # fmt: skip
    assert stored.column("error").to_pylist() == [None, None]
    assert all(1 <= n <= 4 for n in stored.column("n_tokens").to_pylist())
    # each caption row's frames-seen ledger: the spec's 4 frames, and the processor's report of what it made of them
    expected_tokens = EXPECTED_TOKENS[family](d, 4, 120, 160)
    for recorded in stored.column("frames_seen").to_pylist():
        ledger = json.loads(recorded)
        assert ledger["frame_spec"] == spec and ledger["n_frames"] == 4 and ledger["frame_size"] == "160x120"
        report = ledger["processor"]
        assert report["backend"] == "transformers" and report["visual_tokens"] == expected_tokens
        assert report["processor_kwargs"] == {"do_sample_frames": False}
        assert report["metadata"]["frames_indices"] == [round(1000 * t) for t in ledger["timestamps"]]

    cap = _captioner(family)
    seen: list[list[int]] = []
    cap.on_inputs = lambda req, ids: seen.append(ids)
    try:
        frames = decode_frames(clips / "clip0.mp4", FrameSpec.parse(spec))
        (direct,) = cap.caption([CaptionRequest("direct", text, frames.frames, tuple(frames.timestamps), max_tokens=4)])
    finally:
        cap.close()
    assert direct.error is None
    video_id = cap.tokenizer.convert_tokens_to_ids(HF_VIDEO_TOKEN[family])
    assert seen[0].count(video_id) == EXPECTED_TOKENS[family](d, 4, 120, 160)
    assert stored.column("prompt_tokens").to_pylist() == [len(seen[0])] * 2, family
