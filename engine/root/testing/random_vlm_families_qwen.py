"""Tiny random-weight Qwen2-VL, Qwen2.5-VL and Qwen3-VL checkpoints (see engine/root/testing/random_vlm_families.py for the
cached build and for what vLLM's video input needs per family).

Each writer fills a temp dir with the family's real transformers config, model (random weights, safetensors),
processor, image processor and video processor classes at tiny sizes, a BPE tokenizer with the Qwen special tokens
and a chat template that renders <|vision_start|><|video_pad|><|vision_end|> for a video part.
"""

from __future__ import annotations

from pathlib import Path

from capeval.testing.random_vlm_families import HEAD_DIM, randomize_and_save, text_dims, tokenizer_for

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


def _qwen_tokenizer(spec: dict):
    tok = tokenizer_for(spec, QWEN_SPECIAL_TOKENS, eos="<|im_end|>")
    tok.chat_template = QWEN_CHAT_TEMPLATE
    return tok, {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}


def _qwen_vision_tokens(ids: dict) -> dict:
    return dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])


def _qwen_processor(processor_cls, tok):
    """The processor of Qwen2-VL / Qwen2.5-VL: Qwen2VL image and video processors, 14 px patches merged 2x2."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    size = {"shortest_edge": QWEN_MIN_PIXELS, "longest_edge": QWEN_MAX_PIXELS}
    geometry = dict(patch_size=14, temporal_patch_size=2, merge_size=2)
    return processor_cls(image_processor=Qwen2VLImageProcessorPil(size=size, **geometry),
                         video_processor=Qwen2VLVideoProcessor(size=size, **geometry),
                         tokenizer=tok, chat_template=QWEN_CHAT_TEMPLATE)  # fmt: skip


def write_qwen2_vl(tmp: Path, spec: dict) -> None:
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor

    tok, ids = _qwen_tokenizer(spec)
    text = text_dims(len(tok), ids) | {
        # multimodal RoPE: (temporal, height, width) sections of head_dim / 2 rotary pairs
        "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 1e6},
    }
    vision = dict(depth=1, embed_dim=64, hidden_size=64, num_heads=64 // HEAD_DIM, mlp_ratio=2, patch_size=14,
                  temporal_patch_size=2, spatial_merge_size=2, in_channels=3)  # fmt: skip
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision, **_qwen_vision_tokens(ids))
    randomize_and_save(Qwen2VLForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    _qwen_processor(Qwen2VLProcessor, tok).save_pretrained(str(tmp))


def write_qwen2_5_vl(tmp: Path, spec: dict) -> None:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor

    tok, ids = _qwen_tokenizer(spec)
    text = text_dims(len(tok), ids) | {
        "rope_parameters": {"rope_type": "default", "mrope_section": [4, 6, 6], "rope_theta": 1e6},
    }
    # window attention over 112 px windows (4x4 merged patches); block 0 attends fully, as the released models'
    # fullatt_block_indexes do every 8th block
    vision = dict(depth=1, hidden_size=64, intermediate_size=128, num_heads=64 // HEAD_DIM, out_hidden_size=64,
                  patch_size=14, temporal_patch_size=2, spatial_merge_size=2, window_size=112,
                  fullatt_block_indexes=[0], tokens_per_second=2)  # fmt: skip
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **_qwen_vision_tokens(ids))
    randomize_and_save(Qwen2_5_VLForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    _qwen_processor(Qwen2_5_VLProcessor, tok).save_pretrained(str(tmp))


# Qwen3-VL frames: multiples of 32 px; up to this many 64x64 frames keep their size (4x4 patches of 16, 2x2 = 4
# tokens per 2 frames), longer clips shrink every frame to stay within the clip budget.
QWEN3_VIDEO_MAX_FRAMES_AT_64PX = 32


def write_qwen3_vl(tmp: Path, spec: dict) -> None:
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tok, ids = _qwen_tokenizer(spec)
    text = text_dims(len(tok), ids) | {
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
    randomize_and_save(Qwen3VLForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    geometry = dict(patch_size=16, temporal_patch_size=2, merge_size=2)
    image_size = {"shortest_edge": 32 * 32, "longest_edge": 64 * 64}
    # Qwen3-VL's video pixel budget is over the whole clip (frames x height x width), as in the released config
    video_size = {"shortest_edge": 2 * 32 * 32, "longest_edge": QWEN3_VIDEO_MAX_FRAMES_AT_64PX * 64 * 64}
    Qwen3VLProcessor(image_processor=Qwen2VLImageProcessorPil(size=image_size, **geometry),
                     video_processor=Qwen3VLVideoProcessor(size=video_size, **geometry),
                     tokenizer=tok, chat_template=QWEN_CHAT_TEMPLATE).save_pretrained(str(tmp))  # fmt: skip
