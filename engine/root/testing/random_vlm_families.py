"""Tiny random-weight checkpoints of the VLM families people caption with, that vLLM's CPU build loads and runs.

Tests of the video path need the real thing per family: the family's transformers config class, its processor,
image processor and video processor classes, a tokenizer carrying the family's special tokens, and a chat template
that renders a video placeholder the way the released model's template does -- but no downloads and no GPU. Each
builder here makes such a folder from configs (hidden 64, 1-2 layers, head_dim 32 because vLLM's CPU attention needs
>= 32, a small vision tower, small frame sizes) with seeded random weights saved as safetensors. Builds are
deterministic and reused while their build spec matches (capeval.adapters.checkpoints.build_once); a build takes seconds.

    build_tiny_vlm(family, out_dir) -> Path        # family in FAMILIES

The builders live in engine/root/testing/random_vlm_families_qwen.py (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) and
engine/root/testing/random_vlm_families_llava_internvl.py (LLaVA-OneVision, LLaVA-NeXT-Video, InternVL3); this module holds
the registry, the cached build and the helpers they share. The per-family notes below are what a caller of vLLM
needs to know, checked by tests/adapters/test_random_vlm_families.py on vLLM's CPU engine.

What vLLM 0.32 needs per family to take a video (`multi_modal_data={"video": ...}` of `LLM.generate`):

all six: one input form works everywhere (the tests use it) --
    {"prompt": processor.apply_chat_template([{"role": "user", "content": [{"type": "video"},
                                               {"type": "text", "text": PROMPT}]}], add_generation_prompt=True,
                                               tokenize=False),
     "multi_modal_data": {"video": (frames, metadata)},   # frames: uint8 (T, H, W, 3), the frame spec's frames
     "mm_processor_kwargs": {"do_sample_frames": False}}
    metadata describes the SOURCE video: {"fps": the file's frame rate, "frames_indices": the source frame index
    of each frame given, "total_num_frames": the file's frame count, "duration": seconds, "video_backend":
    "opencv"}. vLLM then never resamples; the frames given are the frames seen (Qwen pads an odd count to whole
    pairs by repeating the last frame). The tests start engines with limit_mm_per_prompt={"video": 1, "image": 0}.

qwen2_vl (Qwen2VLForConditionalGeneration)
    Prompt placeholder: "<|vision_start|><|video_pad|><|vision_end|>" (the chat template renders it for a content
    part {"type": "video"}); vLLM expands <|video_pad|> to T*H*W/merge**2 tokens, T = frames / temporal_patch_size (2).
    Video item: a bare (T,H,W,3) uint8 array works, or (array, metadata) with metadata {"fps", "frames_indices",
    "total_num_frames", "duration", "video_backend"} (Qwen2-VL does not use it; give it anyway, one code path for
    all Qwen families). mm_processor_kwargs={"do_sample_frames": False} states that the frames given are the frames
    seen (vLLM's default is no sampling for every family here too; never pass fps/num_frames there). An odd frame
    count is padded by repeating the last frame (to a multiple of temporal_patch_size).
    Processed input: video_grid_thw == [[frames/2, H/14, W/14]] after smart_resize to a multiple of 28 px within
    [min_pixels, max_pixels] of the video processor.

qwen2_5_vl (Qwen2_5_VLForConditionalGeneration)
    Metadata is REQUIRED: a bare array fails in vLLM's input processing ("Video metadata is required but not
    found in mm input"). Otherwise as qwen2_vl (same placeholder, same Qwen2VLVideoProcessor, same grid
    arithmetic), plus the processor returns
    second_per_grid_ts = temporal_patch_size / sampled_fps for the temporal RoPE, where transformers computes
    sampled_fps = len(frames_indices) / total_num_frames * fps from the metadata. So metadata must describe the
    SOURCE video: fps = the file's frame rate, total_num_frames = the file's frame count, frames_indices = the
    source indices of the frames given (without metadata, fps falls back to 24 and the timing is wrong).

qwen3_vl (Qwen3VLForConditionalGeneration)
    Metadata is REQUIRED (vLLM: "Video metadata is required"): (frames, {"fps", "frames_indices",
    "total_num_frames", "duration", "video_backend"}), fps/indices/total of the SOURCE video as above. vLLM expands
    the placeholder into one "<t seconds><|vision_start|><|video_pad|>*k<|vision_end|>" per temporal patch (2
    frames), t = mean of frames_indices[i], frames_indices[i+1] divided by fps ("<0.5 seconds>"), so wrong
    metadata gives wrong timestamps in the prompt. Qwen3VLVideoProcessor's own default is do_sample_frames=True
    (resample at 2 fps), but vLLM sets it from metadata.get("do_sample_frames", False) unless mm_processor_kwargs
    has it: leave both unset or False (passing True, fps or num_frames resamples the frames). Patch 16, merge 2:
    frames resize to multiples of 32 px, and the video pixel budget (size.longest_edge) covers the whole clip
    (frames x H x W), so more frames means smaller frames. Processed input: video_grid_thw == [[frames/2, H/16, W/16]].

llava_onevision (LlavaOnevisionForConditionalGeneration, llava-hf layout; Qwen2 language model, SigLIP tower)
    Prompt placeholder: "<video>" (the template puts all <image> parts, then all <video> parts, then the text after
    a newline: "<|im_start|>user <video>\nPROMPT<|im_end|>\n<|im_start|>assistant\n"). vLLM expands <video> to
    frames * ceil(grid/2)**2 + 1 tokens (grid = image_size/patch, pooled 2x2, one image_newline per video), every
    frame resized to the video processor's square size whatever its aspect. Video item: a bare (T,H,W,3) array
    or (array, metadata); metadata is accepted and unused. The processor does not sample (do_sample_frames False by
    default), so T frames in is T frames seen. Tiny checkpoint: 56 px frames, 4x4 patches -> 4 tokens per frame.
    vLLM 0.32 BUG: two clips of DIFFERENT frame counts in one engine step crash the engine (its
    _process_video_pixels returns (1, n, d) tensors on that path: "Expected multimodal embeddings to be a sequence
    of 2D tensors"); clips of equal length batch fine. Keep one frame count per engine (one frame spec per cell)
    or pad/split by length.

internvl3 (InternVLForConditionalGeneration, the OpenGVLab/InternVL3-*-hf layout; vLLM 0.32 maps it to
interns1.InternS1ForConditionalGeneration. The original InternVLChatModel remote-code layout is not built here.)
    Prompt placeholder: "<video>\n" (template). The tokenizer must carry extra_special_tokens start_image_token
    "<img>", end_image_token "</img>", context_image_token "<IMG_CONTEXT>", video_token "<video>" (the processor
    reads them by these names). vLLM expands <video> to "Frame1: <img><video>*S</img>\nFrame2: ..." -- one
    <img>...</img> block per frame, S = image_seq_length = (image_size/patch)**2 / 4 context tokens (the
    frame features go where the <video> tokens are, not <IMG_CONTEXT>). Every frame is one tile resized to the
    image processor's size (vLLM passes image_processor.size to InternVLVideoProcessor; videos are never tiled).
    Video item: a bare array or (array, metadata); metadata is unused; no sampling by default (do_sample_frames
    False). Tiny checkpoint: 56 px tiles, S = 4.

llava_next_video (LlavaNextVideoForConditionalGeneration, llava-hf/LLaVA-NeXT-Video-*-hf layout; CLIP tower, Llama)
    This is the "LLaVA-Video" family as transformers and vLLM 0.32 have it natively: neither registers
    lmms-lab's LLaVA-Video-*-Qwen2 class (LlavaQwenForCausalLM, remote code of the LLaVA-NeXT repository). That
    network is OneVision's design (SigLIP, Qwen2, pooled frame features), so a llava-hf conversion of it would
    presumably load as llava_onevision -- not verified here.
    Prompt placeholder: "<video>\n" in a Vicuna turn ("USER: <video>\nPROMPT ASSISTANT:"). vLLM expands <video> to
    frames * ceil(grid/2)**2 tokens (average-pooled 2x2, no newline token). Frames: resize shortest edge + center
    crop to the tower's square. Video item: a bare array or (array, metadata); metadata unused; no sampling by
    default. Clips of different lengths batch fine. vLLM 0.32 needs image_size >= patch_size**2 (its pooling
    divides by image_size // patch**2). Tiny checkpoint: 64 px, 8 px patches -> 16 tokens per frame.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from pathlib import Path
from typing import Sequence

from capeval.adapters.checkpoints import build_once, staged_build
from capeval.engine.exitcodes import OK, USAGE
from capeval.testing.random_models import generated_corpus, iter_corpus_texts, train_bpe_tokenizer

BUILD_SPEC_VERSION = 1
HEAD_DIM = 32  # vLLM's CPU attention needs head_dim >= 32, in the language model and in the vision tower

# family -> "module:function" writing the folder's files into a temp dir (imported only when a build runs)
FAMILIES: dict[str, str] = {
    "qwen2_vl": "capeval.testing.random_vlm_families_qwen:write_qwen2_vl",
    "qwen2_5_vl": "capeval.testing.random_vlm_families_qwen:write_qwen2_5_vl",
    "qwen3_vl": "capeval.testing.random_vlm_families_qwen:write_qwen3_vl",
    "llava_onevision": "capeval.testing.random_vlm_families_llava_internvl:write_llava_onevision",
    "llava_next_video": "capeval.testing.random_vlm_families_llava_internvl:write_llava_next_video",
    "internvl3": "capeval.testing.random_vlm_families_llava_internvl:write_internvl3",
}
_RECIPE_FILES = ("random_vlm_families.py", "random_vlm_families_qwen.py", "random_vlm_families_llava_internvl.py")


def build_tiny_vlm(family: str, out_dir: str | os.PathLike, *, seed: int = 0,
                   corpus: Sequence[str | os.PathLike] = ()) -> Path:
    """Build (or reuse) the tiny random-weight checkpoint of `family` in `out_dir`; return the directory.

    `corpus` lists real text files for the tokenizer (capeval.testing.random_models.iter_corpus_texts); empty means a
    generated corpus.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown VLM family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    out = Path(out_dir)
    spec = {"version": BUILD_SPEC_VERSION, "family": family, "seed": seed, "recipe": recipe_hash(),
            "corpus": [str(Path(p).resolve()) for p in corpus]}  # fmt: skip
    return build_once(out, spec, lambda: _build(out, spec, corpus))


def recipe_hash() -> str:
    """The builders' source, hashed: editing one (a size, a token) rebuilds instead of reusing a stale folder."""
    here = Path(__file__).parent
    return hashlib.sha256(b"".join((here / name).read_bytes() for name in _RECIPE_FILES)).hexdigest()[:16]


def _build(out: Path, spec: dict, corpus: Sequence[str | os.PathLike]) -> None:
    # Build in a sibling temp dir and rename: a killed build never leaves a directory that looks complete.
    with staged_build(out, spec) as tmp:  # renamed into place when complete
        module, function = FAMILIES[spec["family"]].split(":")
        getattr(importlib.import_module(module), function)(tmp, spec | {"_corpus": list(corpus)})
        _write_component_configs(tmp)



def _write_component_configs(tmp: Path) -> None:
    """Also write preprocessor_config.json and video_preprocessor_config.json, as the released checkpoints have
    them: transformers 5 nests both in processor_config.json, older loaders read the separate files."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(tmp))
    processor.image_processor.save_pretrained(str(tmp))
    processor.video_processor.save_pretrained(str(tmp))


def tokenizer_for(spec: dict, special_tokens: list[str], eos: str, vocab: int = 1024):
    corpus = spec["_corpus"]
    texts = iter_corpus_texts(corpus) if corpus else generated_corpus(n_lines=4000)
    return train_bpe_tokenizer(texts, vocab, special_tokens, eos_token=eos)


def randomize_and_save(model, tmp: Path, seed: int, eos_id: int) -> None:
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():  # default init (std 0.02) makes near-uniform logits; widen it
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5)
    model.generation_config.eos_token_id = eos_id
    model.save_pretrained(str(tmp), safe_serialization=True)


def rename_weights(tmp: Path, prefixes: dict[str, str], drop: tuple[str, ...] = ()) -> None:
    """Rewrite saved tensor names to the layout of the family's released checkpoints, which vLLM's loader expects:
    transformers 5 saves some vision towers one level flatter (`vision_tower.embeddings` where the released
    llava-hf checkpoints have `vision_tower.vision_model.embeddings`)."""
    from safetensors.torch import load_file, save_file

    path = tmp / "model.safetensors"
    tensors = load_file(str(path))
    renamed = {}
    for name, tensor in tensors.items():
        if name.startswith(drop):
            continue
        for old, new in prefixes.items():
            if name.startswith(old) and not name.startswith(new):
                name = new + name[len(old):]
                break
        renamed[name] = tensor
    save_file(renamed, str(path), metadata={"format": "pt"})


def text_dims(vocab: int, ids: dict, *, hidden: int = 64, layers: int = 2, eos: str = "<|im_end|>") -> dict:
    return dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                num_attention_heads=hidden // HEAD_DIM, num_key_value_heads=hidden // HEAD_DIM, head_dim=HEAD_DIM,
                max_position_embeddings=4096, bos_token_id=ids.get("<s>"), eos_token_id=ids[eos],
                pad_token_id=ids["<pad>"], tie_word_embeddings=False)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """python -m capeval.testing.random_vlm_families FAMILY OUT_DIR [SEED]: build once and print the folder."""
    import argparse

    families = ", ".join(sorted(FAMILIES))
    parser = argparse.ArgumentParser(prog="python -m capeval.testing.random_vlm_families",
                                     description="Build (or reuse) a tiny random-weight checkpoint of one VLM family "
                                                 "and print its folder.")
    parser.add_argument("family", metavar="FAMILY", help=f"one of {families}")
    parser.add_argument("out_dir", help="where to build it")
    parser.add_argument("seed", nargs="?", type=int, default=0, help="weight seed (default 0)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help (0) or a bad argument (2): returned, as main's callers expect a code
        return int(stop.code or 0)
    if args.family not in FAMILIES:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: FAMILY one of {families}; got {args.family!r}", file=sys.stderr)
        return USAGE
    print(build_tiny_vlm(args.family, args.out_dir, seed=args.seed))
    return OK


if __name__ == "__main__":
    raise SystemExit(main())
