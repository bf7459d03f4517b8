"""Tiny random-weight checkpoints of each VLM family (capeval.testing.random_vlm_families) load with transformers and run a
video on vLLM's real CPU engine, and the engine's processed prompt holds exactly the placeholder tokens of the frames
given (the model saw N frames, not some resampled count).

Each family's folder is built once into the suite's model cache and reused; each engine is started, used for one
short generation and closed (capeval.adapters.vllm_compat), so the families run one after another in one process.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from capeval.adapters.checkpoints import model_cache
from capeval.testing.random_vlm_families import FAMILIES, build_tiny_vlm

N_FRAMES = 4
SIDE = 64  # frames are 64x64 RGB; each family resizes them to its own tiny processor size
FPS = 2.0


def _frames(n: int = N_FRAMES, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, SIDE, SIDE, 3), dtype=np.uint8)


def _metadata(n: int) -> dict:
    # the frames were taken every 2nd frame of a 2n-frame clip at FPS: what a frame spec's decode knows
    return {"fps": FPS, "frames_indices": list(range(0, 2 * n, 2)), "total_num_frames": 2 * n,
            "duration": 2 * n / FPS, "video_backend": "opencv"}  # fmt: skip


# Per family: the video placeholder token after vLLM's expansion, and how many of them N frames of SIDE x SIDE must
# become (the frames-seen arithmetic written out from the family's processor settings).
EXPECTED_VIDEO_TOKENS = {
    # 64 px -> 56 px (multiple of 28 within max_pixels 56*56): 4x4 patches of 14, merged 2x2 -> 4 tokens per
    # temporal patch of 2 frames
    "qwen2_vl": ("<|video_pad|>", lambda n: (n // 2) * 4),
    "qwen2_5_vl": ("<|video_pad|>", lambda n: (n // 2) * 4),  # same processor geometry as Qwen2-VL
    # 64 px stays 64 px (multiple of 32, clip budget 32 frames of 64x64): 4x4 patches of 16, merged 2x2
    "qwen3_vl": ("<|video_pad|>", lambda n: (n // 2) * 4),
    # every frame resized to 56x56: 4x4 patches of 14, pooled 2x2 -> 4 tokens, plus one newline per video
    "llava_onevision": ("<video>", lambda n: 4 * n + 1),
    # one 56 px tile per frame: 4x4 patches of 14, pixel-shuffled 2x2 -> 4 tokens inside each <img>...</img> block
    "internvl3": ("<video>", lambda n: 4 * n),
    # 64 px center crop: 8x8 patches of 8, average-pooled 2x2 -> 16 tokens per frame, no newline
    "llava_next_video": ("<video>", lambda n: 16 * n),
}


# vLLM 0.32 refuses a video without (frames, metadata) for these families
NEEDS_METADATA = {"qwen2_5_vl", "qwen3_vl"}

# How each family's chat template renders a user turn of [video, text "Describe the video."]
RENDERED_VIDEO_PART = {
    "qwen2_vl": "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Describe the video.<|im_end|>",
    "qwen2_5_vl": "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Describe the video.<|im_end|>",
    "qwen3_vl": "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Describe the video.<|im_end|>",
    "llava_onevision": "<|im_start|>user <video>\nDescribe the video.<|im_end|>",
    "internvl3": "<|im_start|>user\n<video>\nDescribe the video.<|im_end|>",
    "llava_next_video": "USER: <video>\nDescribe the video. ASSISTANT:",
}


@pytest.fixture(scope="module")
def family_dirs():
    return {f: build_tiny_vlm(f, model_cache() / f"tiny-{f.replace('_', '-')}") for f in FAMILIES}


def test_builds_are_reused_by_content(tmp_path):
    import time

    first = build_tiny_vlm("qwen2_vl", tmp_path / "q")
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    t0 = time.monotonic()
    assert build_tiny_vlm("qwen2_vl", tmp_path / "q") == first
    assert time.monotonic() - t0 < 1.0
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert build_tiny_vlm("qwen2_vl", tmp_path / "q", seed=1) == first  # another spec rebuilds in place
    assert (first / "model.safetensors").stat().st_mtime_ns != stamp
    assert json.loads((first / "capeval_build.json").read_text())["seed"] == 1


def test_build_spec_records_the_builders_source_so_an_edited_builder_rebuilds(tmp_path):
    import hashlib
    from pathlib import Path

    import capeval.testing.random_vlm_families as families

    d = build_tiny_vlm("qwen2_vl", tmp_path / "q")
    spec = json.loads((d / "capeval_build.json").read_text())
    builder_files = {Path(__import__(m.split(":")[0], fromlist=["_"]).__file__).name for m in FAMILIES.values()}
    assert builder_files | {"random_vlm_families.py"} == set(families._RECIPE_FILES)  # every builder is hashed
    here = Path(families.__file__).parent
    expected = hashlib.sha256(b"".join((here / f).read_bytes() for f in families._RECIPE_FILES)).hexdigest()[:16]
    assert spec["recipe"] == expected
    # a folder built by another version of the builders (another recipe) is rebuilt, not reused
    (d / "capeval_build.json").write_text(json.dumps(spec | {"recipe": "an-older-builder"}))
    stamp = (d / "model.safetensors").stat().st_mtime_ns
    build_tiny_vlm("qwen2_vl", tmp_path / "q")
    assert (d / "model.safetensors").stat().st_mtime_ns != stamp


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="unknown VLM family 'qwen9'.*qwen2_vl"):
        build_tiny_vlm("qwen9", "/nonexistent")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_loads_with_transformers_auto_classes(family, family_dirs):
    from transformers import AutoConfig, AutoProcessor

    d = family_dirs[family]
    cfg = AutoConfig.from_pretrained(d)
    proc = AutoProcessor.from_pretrained(d)
    assert getattr(proc, "video_processor", None) is not None, "a video-capable processor"
    # the separate component configs of the released folders, equal to what processor_config.json nests
    nested = json.loads((d / "processor_config.json").read_text())
    for name, key in (("preprocessor_config.json", "image_processor"), ("video_preprocessor_config.json",
                                                                         "video_processor")):  # fmt: skip
        assert json.loads((d / name).read_text())["size"] == nested[key]["size"], name
    placeholder, n_tokens = EXPECTED_VIDEO_TOKENS[family]
    assert proc.tokenizer.convert_tokens_to_ids(placeholder) not in (None, proc.tokenizer.unk_token_id)
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Describe the video."}]}]
    prompt = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert RENDERED_VIDEO_PART[family] in prompt, prompt  # the placeholder where the released template puts it
    assert cfg.architectures and cfg.architectures[0].endswith("ForConditionalGeneration")


@pytest.mark.vllm
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_runs_a_video_on_vllm_cpu_and_sees_exactly_the_frames_given(family, family_dirs):
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine core
    from transformers import AutoProcessor
    from vllm import LLM, SamplingParams

    from capeval.adapters.vllm_compat import close_engine, track_engine, vllm_engine_start_guard

    d = family_dirs[family]
    proc = AutoProcessor.from_pretrained(d)
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Describe the video."}]}]
    prompt = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    from _fixtures_vllm import small_kv_cache

    with vllm_engine_start_guard(), small_kv_cache() as kv:
        llm = LLM(model=str(d), max_model_len=2048, enforce_eager=True, seed=0, max_num_seqs=2,
                  limit_mm_per_prompt={"video": 1, "image": 0}, **kv)  # fmt: skip
    track_engine(llm)
    try:
        placeholder, n_tokens = EXPECTED_VIDEO_TOKENS[family]
        pid = proc.tokenizer.convert_tokens_to_ids(placeholder)
        for n in (N_FRAMES, 2 * N_FRAMES):
            # one clip length per generate call: vLLM 0.32's LLaVA-OneVision fails on clips of different lengths
            # in one engine step (see the module doc of capeval.testing.random_vlm_families)
            inputs = [{"prompt": prompt, "multi_modal_data": {"video": (_frames(n, seed), _metadata(n))},
                       "mm_processor_kwargs": {"do_sample_frames": False}} for seed in (0, 1)]  # fmt: skip
            outs = llm.generate(inputs, SamplingParams(max_tokens=4, temperature=0), use_tqdm=False)
            out = outs[0]
            assert outs[1].prompt_token_ids == out.prompt_token_ids
            assert out.prompt_token_ids.count(pid) == n_tokens(n), (family, n)
            assert all(len(o.outputs[0].token_ids) >= 1 for o in outs)
            if family == "qwen3_vl":  # one "<t seconds>" per temporal patch, from the metadata's indices and fps
                text = proc.tokenizer.decode(out.prompt_token_ids)
                stamps = [(2 * i + 2 * (i + 1)) / 2 / FPS for i in range(0, n, 2)]  # centres of index pairs
                assert [f"<{t:.1f} seconds>" in text for t in stamps] == [True] * (n // 2), text
            if family == "internvl3":  # one "FrameK: <img>...</img>" block per frame given
                text = proc.tokenizer.decode(out.prompt_token_ids)
                assert out.prompt_token_ids.count(proc.tokenizer.convert_tokens_to_ids("<img>")) == n
                assert f"Frame{n}: <img>" in text and f"Frame{n + 1}:" not in text
        if family in NEEDS_METADATA:  # a bare frame array is refused before it reaches the engine
            with pytest.raises(ValueError, match="[Mm]etadata is required"):
                llm.generate([{"prompt": prompt, "multi_modal_data": {"video": _frames(N_FRAMES)}}], use_tqdm=False)
    finally:
        close_engine(llm)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_qwen_processors_pad_odd_frame_counts_and_time_from_source_metadata(family, family_dirs):
    """What the module doc tells callers: an odd frame count is padded to whole temporal patches of 2, and Qwen2.5-VL's
    temporal RoPE step comes from the metadata (sampled fps = len(frames_indices) / total_num_frames * fps)."""
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(family_dirs[family])
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Describe the video."}]}]
    prompt = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    for n, grid_t in ((3, 2), (4, 2), (5, 3)):
        out = proc(text=[prompt], videos=[_frames(n)], video_metadata=[_metadata(n)], do_sample_frames=False,
                   return_tensors="pt")  # fmt: skip
        assert out["video_grid_thw"].tolist() == [[grid_t, 4, 4]], (family, n)
        if family == "qwen2_5_vl":  # every 2nd source frame at FPS: sampled fps FPS / 2, a patch of 2 frames spans 2 s
            assert out["second_per_grid_ts"].tolist() == [2 / (FPS / 2)]


def test_command_line_builds_a_family_and_refuses_an_unknown_one_with_exit_2(tmp_path, capsys):
    from capeval.testing.random_vlm_families import main

    assert main(["qwen9", str(tmp_path / "x")]) == 2
    assert "FAMILY one of internvl3, llava_next_video" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    assert main(["internvl3", str(tmp_path / "i")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "i")
    assert (tmp_path / "i" / "model.safetensors").is_file()
