"""Tiny random-weight checkpoints of the VLM families people caption with, that vLLM's CPU build loads and runs.

Tests of the video path need the real thing per family: the family's transformers config class, its processor,
image processor and video processor classes, a tokenizer carrying the family's special tokens, and a chat template
that renders a video placeholder the way the released model's template does -- but no downloads and no GPU. Each
builder here makes such a folder from configs (hidden 64, 1-2 layers, head_dim 32 because vLLM's CPU attention needs
>= 32, a small vision tower, small frame sizes) with seeded random weights saved as safetensors. Builds are
deterministic and reused while their build spec matches (adapters.random_models.build_once); a build takes seconds.

    build_tiny_vlm(family, out_dir) -> Path        # family in FAMILIES

What vLLM 0.32 needs per family to take a video (`multi_modal_data={"video": ...}` of `LLM.generate`):

qwen2_vl (Qwen2VLForConditionalGeneration)
    Prompt placeholder: "<|vision_start|><|video_pad|><|vision_end|>" (the chat template renders it for a content
    part {"type": "video"}); vLLM expands <|video_pad|> to T*H*W/merge**2 tokens, T = frames / temporal_patch_size (2).
    Video item: a (T,H,W,3) uint8 array, or (array, metadata) with metadata {"fps", "frames_indices",
    "total_num_frames", "duration", "video_backend"}; Qwen2-VL's processor does not use the metadata, but giving
    it does no harm. Pass mm_processor_kwargs={"do_sample_frames": False} so the frames given are the frames seen.
    An odd frame count is padded by repeating the last frame (to a multiple of temporal_patch_size).
    Processed input: video_grid_thw == [[frames/2, H/14, W/14]] after smart_resize to a multiple of 28 px within
    [min_pixels, max_pixels] of the video processor.

qwen2_5_vl (Qwen2_5_VLForConditionalGeneration)
    As qwen2_vl (same placeholder, same Qwen2VLVideoProcessor, same grid arithmetic), plus the processor returns
    second_per_grid_ts = temporal_patch_size / sampled_fps for the temporal RoPE, where transformers computes
    sampled_fps = len(frames_indices) / total_num_frames * fps from the metadata. So metadata must describe the
    SOURCE video: fps = the file's frame rate, total_num_frames = the file's frame count, frames_indices = the
    source indices of the frames given (without metadata, fps falls back to 24 and the timing is wrong).

qwen3_vl (Qwen3VLForConditionalGeneration)
    Metadata is REQUIRED (vLLM: "Video metadata is required"): (frames, {"fps", "frames_indices",
    "total_num_frames", "duration", "video_backend"}), fps/indices/total of the SOURCE video as above. vLLM expands
    the placeholder into one "<t seconds><|vision_start|><|video_pad|>*k<|vision_end|>" per temporal patch (2
    frames), t = mean of frames_indices[i], frames_indices[i+1] divided by fps ("<0.5 seconds>"), so wrong
    metadata gives wrong timestamps in the prompt. Qwen3VLVideoProcessor defaults to do_sample_frames=True
    (resampling at 2 fps from the metadata): pass mm_processor_kwargs={"do_sample_frames": False} (or
    "do_sample_frames": False inside the metadata) so the frames given are the frames seen. Patch 16, merge 2:
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
    lmms-lab's LLaVA-Video-*-Qwen2 class (LlavaQwenForCausalLM, remote code of the LLaVA-NeXT repository).
    Prompt placeholder: "<video>\n" in a Vicuna turn ("USER: <video>\nPROMPT ASSISTANT:"). vLLM expands <video> to
    frames * ceil(grid/2)**2 tokens (average-pooled 2x2, no newline token). Frames: resize shortest edge + center
    crop to the tower's square. Video item: a bare array or (array, metadata); metadata unused; no sampling by
    default. Clips of different lengths batch fine. vLLM 0.32 needs image_size >= patch_size**2 (its pooling
    divides by image_size // patch**2). Tiny checkpoint: 64 px, 8 px patches -> 16 tokens per frame.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from adapters.random_models import BUILD_SPEC_FILE, build_once, generated_corpus, iter_corpus_texts, train_bpe_tokenizer

BUILD_SPEC_VERSION = 1
HEAD_DIM = 32  # vLLM's CPU attention needs head_dim >= 32, in the language model and in the vision tower

# ---- Qwen2-VL / Qwen2.5-VL / Qwen3-VL: ChatML with <|vision_start|><|video_pad|><|vision_end|> placeholders -------
QWEN_SPECIAL_TOKENS = [
    "<unk>", "<s>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]  # fmt: skip
# The released Qwen-VL templates' shape: a default system turn, then each content part; an image part renders
# <|vision_start|><|image_pad|><|vision_end|>, a video part <|vision_start|><|video_pad|><|vision_end|>. vLLM's chat
# path hands parts over as {"type": "video"} / {"type": "image"} (OpenAI's video_url / image_url are accepted too).
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part or 'video_url' in part %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Frames are resized to multiples of patch * merge = 28 px with at most QWEN_MAX_PIXELS pixels: a 64x64 frame becomes
# 56x56, 4x4 patches, 2x2 = 4 tokens per temporal patch of 2 frames.
QWEN_MIN_PIXELS, QWEN_MAX_PIXELS = 28 * 28, 56 * 56

FAMILIES: dict[str, Callable[[Path, dict], None]] = {}  # filled below: family name -> writer of the folder


def build_tiny_vlm(family: str, out_dir: str | os.PathLike, *, seed: int = 0,
                   corpus: Sequence[str | os.PathLike] = ()) -> Path:
    """Build (or reuse) the tiny random-weight checkpoint of `family` in `out_dir`; return the directory.

    `corpus` lists real text files for the tokenizer (adapters.random_models.iter_corpus_texts); empty means a
    generated corpus.
    """
    if family not in FAMILIES:
        raise ValueError(f"unknown VLM family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    out = Path(out_dir)
    # The recipe is this file: editing a builder (a size, a token) rebuilds instead of reusing a stale folder.
    recipe = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    spec = {"version": BUILD_SPEC_VERSION, "family": family, "seed": seed, "recipe": recipe,
            "corpus": [str(Path(p).resolve()) for p in corpus]}  # fmt: skip
    return build_once(out, spec, lambda: _build(out, spec, corpus))


def _build(out: Path, spec: dict, corpus: Sequence[str | os.PathLike]) -> None:
    # Build in a sibling temp dir and rename: a killed build never leaves a directory that looks complete.
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        FAMILIES[spec["family"]](tmp, spec | {"_corpus": list(corpus)})
        (tmp / BUILD_SPEC_FILE).write_text(json.dumps(spec, indent=1, sort_keys=True))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _tokenizer(spec: dict, special_tokens: list[str], eos: str, vocab: int = 1024):
    corpus = spec["_corpus"]
    texts = iter_corpus_texts(corpus) if corpus else generated_corpus(n_lines=4000)
    return train_bpe_tokenizer(texts, vocab, special_tokens, eos_token=eos)


def _randomize_and_save(model, tmp: Path, seed: int, eos_id: int) -> None:
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():  # default init (std 0.02) makes near-uniform logits; widen it
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5)
    model.generation_config.eos_token_id = eos_id
    model.save_pretrained(str(tmp), safe_serialization=True)


def _rename_weights(tmp: Path, prefixes: dict[str, str], drop: tuple[str, ...] = ()) -> None:
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


def _text_dims(vocab: int, ids: dict, *, hidden: int = 64, layers: int = 2, eos: str = "<|im_end|>") -> dict:
    return dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                num_attention_heads=hidden // HEAD_DIM, num_key_value_heads=hidden // HEAD_DIM, head_dim=HEAD_DIM,
                max_position_embeddings=4096, bos_token_id=ids.get("<s>"), eos_token_id=ids[eos],
                pad_token_id=ids["<pad>"], tie_word_embeddings=False)  # fmt: skip


def _qwen_tokenizer(spec: dict):
    tok = _tokenizer(spec, QWEN_SPECIAL_TOKENS, eos="<|im_end|>")
    tok.chat_template = QWEN_CHAT_TEMPLATE
    return tok, {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}


def _qwen_vision_tokens(ids: dict) -> dict:
    return dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])


def _write_qwen2_vl(tmp: Path, spec: dict) -> None:
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tok, ids = _qwen_tokenizer(spec)
    text = _text_dims(len(tok), ids) | {
        # multimodal RoPE: (temporal, height, width) sections of head_dim / 2 rotary pairs
        "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 1e6},
    }
    vision = dict(depth=1, embed_dim=64, hidden_size=64, num_heads=64 // HEAD_DIM, mlp_ratio=2, patch_size=14,
                  temporal_patch_size=2, spatial_merge_size=2, in_channels=3)  # fmt: skip
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision, **_qwen_vision_tokens(ids))
    _randomize_and_save(Qwen2VLForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    size = {"shortest_edge": QWEN_MIN_PIXELS, "longest_edge": QWEN_MAX_PIXELS}
    processor = Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessorPil(size=size, patch_size=14, temporal_patch_size=2, merge_size=2),
        video_processor=Qwen2VLVideoProcessor(size=size, patch_size=14, temporal_patch_size=2, merge_size=2),
        tokenizer=tok, chat_template=QWEN_CHAT_TEMPLATE,
    )  # fmt: skip
    processor.save_pretrained(str(tmp))


FAMILIES["qwen2_vl"] = _write_qwen2_vl


def _qwen_processor(processor_cls, tok, *, patch: int = 14, merge: int = 2, min_pixels: int = QWEN_MIN_PIXELS,
                    max_pixels: int = QWEN_MAX_PIXELS):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    geometry = dict(patch_size=patch, temporal_patch_size=2, merge_size=merge)
    return processor_cls(image_processor=Qwen2VLImageProcessorPil(size=size, **geometry),
                         video_processor=Qwen2VLVideoProcessor(size=size, **geometry),
                         tokenizer=tok, chat_template=QWEN_CHAT_TEMPLATE)  # fmt: skip


def _write_qwen2_5_vl(tmp: Path, spec: dict) -> None:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor

    tok, ids = _qwen_tokenizer(spec)
    text = _text_dims(len(tok), ids) | {
        "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 1e6},
    }
    # window attention over 112 px windows (4x4 merged patches); block 0 attends fully, as the released models'
    # fullatt_block_indexes do every 8th block
    vision = dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=64 // HEAD_DIM, out_hidden_size=64,
                  patch_size=14, temporal_patch_size=2, spatial_merge_size=2, window_size=112,
                  fullatt_block_indexes=[0], tokens_per_second=2)  # fmt: skip
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **_qwen_vision_tokens(ids))
    _randomize_and_save(Qwen2_5_VLForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    _qwen_processor(Qwen2_5_VLProcessor, tok).save_pretrained(str(tmp))


FAMILIES["qwen2_5_vl"] = _write_qwen2_5_vl


def _write_qwen3_vl(tmp: Path, spec: dict) -> None:
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tok, ids = _qwen_tokenizer(spec)
    text = _text_dims(len(tok), ids) | {
        # interleaved multimodal RoPE (the released Qwen3-VL setting), sections of head_dim / 2
        "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "mrope_interleaved": True,
                            "rope_theta": 5e6},
    }  # fmt: skip
    # patch 16, merge 2: frames resize to multiples of 32 px. num_position_embeddings is a square grid (8x8) that
    # the vision tower interpolates to each frame's patch grid; the deepstack layer feeds block 0's features in too.
    vision = dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=64 // HEAD_DIM, out_hidden_size=64,
                  patch_size=16, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=64,
                  deepstack_visual_indexes=[0])  # fmt: skip
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, **_qwen_vision_tokens(ids))
    _randomize_and_save(Qwen3VLForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    geometry = dict(patch_size=16, temporal_patch_size=2, merge_size=2)
    image_size = {"shortest_edge": 32 * 32, "longest_edge": 64 * 64}
    # Qwen3-VL's video pixel budget is over the whole clip (frames x height x width), as in the released config
    video_size = {"shortest_edge": 2 * 32 * 32, "longest_edge": QWEN3_VIDEO_MAX_FRAMES_AT_64PX * 64 * 64}
    Qwen3VLProcessor(image_processor=Qwen2VLImageProcessorPil(size=image_size, **geometry),
                     video_processor=Qwen3VLVideoProcessor(size=video_size, **geometry),
                     tokenizer=tok, chat_template=QWEN_CHAT_TEMPLATE).save_pretrained(str(tmp))  # fmt: skip


# Qwen3-VL frames: multiples of 32 px; up to this many 64x64 frames keep their size (4x4 patches of 16, 2x2 = 4
# tokens per 2 frames), longer clips shrink every frame to stay within the clip budget.
QWEN3_VIDEO_MAX_FRAMES_AT_64PX = 32
FAMILIES["qwen3_vl"] = _write_qwen3_vl


# ---- LLaVA-OneVision / LLaVA-NeXT-Video: a SigLIP/CLIP tower, one <video> placeholder, pooled frame features -----
LLAVA_SPECIAL_TOKENS = ["<unk>", "<s>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]
# The released llava-hf OneVision template's shape: the role, then every image part as <image>, every video part as
# <video>, then the text parts each after a newline; ChatML turns. Newlines are Jinja string literals because
# transformers renders templates with trim_blocks (a newline right after a block tag is dropped).
LLAVA_OV_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }} "
    "{% if message['content'] is string %}{{ '\\n' + message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image_url' in part %}<image>{% endif %}{% endfor %}"
    "{% for part in message['content'] %}{% if part['type'] == 'video' or 'video_url' in part %}<video>{% endif %}"
    "{% endfor %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ '\\n' + part['text'] }}"
    "{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Vision geometry: frames resize to LLAVA_SIDE square, patches of 14 -> a 4x4 grid; a video frame is pooled 2x2
# (spatial_pool_stride) to 4 tokens, and one image_newline token ends the whole video: 4 * frames + 1.
LLAVA_SIDE, LLAVA_PATCH = 56, 14


def _llava_tokenizer(spec: dict, template: str):
    tok = _tokenizer(spec, LLAVA_SPECIAL_TOKENS, eos="<|im_end|>")
    tok.chat_template = template
    return tok, {t: tok.convert_tokens_to_ids(t) for t in LLAVA_SPECIAL_TOKENS}


def _siglip_vision(side: int = LLAVA_SIDE) -> dict:
    return dict(model_type="siglip_vision_model", hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                num_attention_heads=64 // HEAD_DIM, image_size=side, patch_size=LLAVA_PATCH,
                vision_use_head=False)  # fmt: skip


def _write_llava_onevision(tmp: Path, spec: dict) -> None:
    from transformers import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration, LlavaOnevisionProcessor
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil)
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor

    tok, ids = _llava_tokenizer(spec, LLAVA_OV_CHAT_TEMPLATE)
    text = _text_dims(len(tok), ids) | {"model_type": "qwen2"}
    # anyres tiles of one or two LLAVA_SIDE squares per side, as the released models tile 384 px squares
    pinpoints = [[LLAVA_SIDE * a, LLAVA_SIDE * b] for a in (1, 2) for b in (1, 2)]
    cfg = LlavaOnevisionConfig(
        text_config=text, vision_config=_siglip_vision(), image_token_index=ids["<image>"],
        video_token_index=ids["<video>"], vision_feature_select_strategy="full", vision_feature_layer=-1,
        image_grid_pinpoints=pinpoints, vision_aspect_ratio="anyres_max_9", tie_word_embeddings=False,
    )  # fmt: skip
    _randomize_and_save(LlavaOnevisionForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    # the OneVision models use SigLIP without its pooling head (features come from the patch tokens)
    _rename_weights(tmp, {"vision_tower.": "vision_tower.vision_model."}, drop=("vision_tower.head.",))
    size = {"height": LLAVA_SIDE, "width": LLAVA_SIDE}
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessorPil(size=size, image_grid_pinpoints=pinpoints),
        video_processor=LlavaOnevisionVideoProcessor(size=size), tokenizer=tok,
        num_image_tokens=(LLAVA_SIDE // LLAVA_PATCH) ** 2, vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9", chat_template=LLAVA_OV_CHAT_TEMPLATE,
    )  # fmt: skip
    processor.save_pretrained(str(tmp))


FAMILIES["llava_onevision"] = _write_llava_onevision


# ---- InternVL3 (llava-hf style "-hf" layout: InternVLForConditionalGeneration; vLLM serves it with interns1.py) ----
INTERNVL_SPECIAL_TOKENS = ["<unk>", "<s>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>",
                           "<IMG_CONTEXT>", "<video>"]  # fmt: skip
# The InternVL3-hf template's shape: ChatML; an image part renders "<IMG_CONTEXT>\n", a video part "<video>\n", then
# the text. (The released template also inserts a default system prompt; a tiny model does not need it.)
INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}{{ '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image_url' in part %}{{ '<IMG_CONTEXT>\\n' }}"
    "{% elif part['type'] == 'video' or 'video_url' in part %}{{ '<video>\\n' }}"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{% endif %}"
)
# A frame is one 56 px tile (videos are never tiled): 4x4 patches of 14, pixel-shuffled by downsample 0.5 to 4 tokens.
INTERNVL_SIDE, INTERNVL_PATCH = 56, 14
INTERNVL_TOKENS_PER_FRAME = (INTERNVL_SIDE // INTERNVL_PATCH // 2) ** 2


def _write_internvl3(tmp: Path, spec: dict) -> None:
    from transformers import InternVLConfig, InternVLForConditionalGeneration, InternVLProcessor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

    from transformers import PreTrainedTokenizerFast

    trained = _tokenizer(spec, INTERNVL_SPECIAL_TOKENS, eos="<|im_end|>")
    # the processor finds its tokens by these names (the released tokenizer_config's extra_special_tokens)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=trained.backend_tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="<|im_end|>",
        pad_token="<pad>", model_max_length=1 << 20,
        extra_special_tokens={"start_image_token": "<img>", "end_image_token": "</img>",
                              "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"},
    )  # fmt: skip
    tok.chat_template = INTERNVL_CHAT_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in INTERNVL_SPECIAL_TOKENS}
    text = _text_dims(len(tok), ids) | {"model_type": "qwen2"}
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=64 // HEAD_DIM,
                  image_size=[INTERNVL_SIDE] * 2, patch_size=[INTERNVL_PATCH] * 2)  # fmt: skip
    cfg = InternVLConfig(vision_config=vision, text_config=text, image_token_id=ids["<IMG_CONTEXT>"],
                         image_seq_length=INTERNVL_TOKENS_PER_FRAME, downsample_ratio=0.5,
                         vision_feature_layer=-1, tie_word_embeddings=False)  # fmt: skip
    _randomize_and_save(InternVLForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    size = {"height": INTERNVL_SIDE, "width": INTERNVL_SIDE}
    InternVLProcessor(
        image_processor=GotOcr2ImageProcessorPil(size=size, crop_to_patches=False, max_patches=1),
        video_processor=InternVLVideoProcessor(size=size), tokenizer=tok,
        image_seq_length=INTERNVL_TOKENS_PER_FRAME, chat_template=INTERNVL_CHAT_TEMPLATE,
    ).save_pretrained(str(tmp))  # fmt: skip


FAMILIES["internvl3"] = _write_internvl3


# ---- LLaVA-NeXT-Video (the LLaVA-Video family as vLLM and transformers have it natively) -------------------------
LLAVA_NEXT_VIDEO_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<image>", "<video>"]
# The released llava-hf LLaVA-NeXT-Video template's shape (Vicuna): "USER: " then every <image>\n, every <video>\n,
# then the texts each followed by a space, and "ASSISTANT:" to generate.
LLAVA_NEXT_VIDEO_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] + ' ' }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image_url' in part %}{{ '<image>\\n' }}{% endif %}{% endfor %}"
    "{% for part in message['content'] %}{% if part['type'] == 'video' or 'video_url' in part %}{{ '<video>\\n' }}"
    "{% endif %}{% endfor %}{% for part in message['content'] %}{% if part['type'] == 'text' %}"
    "{{ part['text'] + ' ' }}{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '</s>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


# vLLM 0.32's pooling divides by image_size // patch_size**2 (1 for the released 336 px / 14 px tower), which is 0
# for a 56 px tower of 14 px patches: the tiny tower uses 64 px frames of 8 px patches (an 8x8 grid, pooled 2x2 to
# 16 tokens per frame).
LLAVA_NEXT_VIDEO_SIDE, LLAVA_NEXT_VIDEO_PATCH = 64, 8


def _write_llava_next_video(tmp: Path, spec: dict) -> None:
    from transformers import LlavaNextVideoConfig, LlavaNextVideoForConditionalGeneration, LlavaNextVideoProcessor
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil
    from transformers.models.llava_next_video.video_processing_llava_next_video import LlavaNextVideoVideoProcessor

    tok = _tokenizer(spec, LLAVA_NEXT_VIDEO_SPECIAL_TOKENS, eos="</s>")
    tok.chat_template = LLAVA_NEXT_VIDEO_CHAT_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in LLAVA_NEXT_VIDEO_SPECIAL_TOKENS}
    text = _text_dims(len(tok), ids, eos="</s>") | {"model_type": "llama"}
    # CLIP tower, features from the second-to-last layer without CLS ("default"), as released
    vision = dict(model_type="clip_vision_model", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=64 // HEAD_DIM, image_size=LLAVA_NEXT_VIDEO_SIDE,
                  patch_size=LLAVA_NEXT_VIDEO_PATCH, projection_dim=64)  # fmt: skip
    pinpoints = [[LLAVA_NEXT_VIDEO_SIDE * a, LLAVA_NEXT_VIDEO_SIDE * b] for a in (1, 2) for b in (1, 2)]
    grid = LLAVA_NEXT_VIDEO_SIDE // LLAVA_NEXT_VIDEO_PATCH
    cfg = LlavaNextVideoConfig(
        text_config=text, vision_config=vision, image_token_index=ids["<image>"], video_token_index=ids["<video>"],
        vision_feature_select_strategy="default", vision_feature_layer=-2, image_grid_pinpoints=pinpoints,
        spatial_pool_mode="average", spatial_pool_stride=2, image_seq_length=grid**2,
        video_seq_length=(grid // 2) ** 2, tie_word_embeddings=False,
    )  # fmt: skip
    _randomize_and_save(LlavaNextVideoForConditionalGeneration(cfg), tmp, spec["seed"], ids["</s>"])
    _rename_weights(tmp, {"vision_tower.": "vision_tower.vision_model."})
    side = LLAVA_NEXT_VIDEO_SIDE
    size, crop = {"shortest_edge": side}, {"height": side, "width": side}
    LlavaNextVideoProcessor(
        video_processor=LlavaNextVideoVideoProcessor(size=size, crop_size=crop),
        image_processor=LlavaNextImageProcessorPil(size=size, crop_size=crop, image_grid_pinpoints=pinpoints),
        tokenizer=tok, patch_size=LLAVA_NEXT_VIDEO_PATCH, vision_feature_select_strategy="default",
        num_additional_image_tokens=1, chat_template=LLAVA_NEXT_VIDEO_CHAT_TEMPLATE,
    ).save_pretrained(str(tmp))  # fmt: skip


FAMILIES["llava_next_video"] = _write_llava_next_video
