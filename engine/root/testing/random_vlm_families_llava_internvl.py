"""Tiny random-weight LLaVA-OneVision, LLaVA-NeXT-Video and InternVL3 checkpoints in the llava-hf / "-hf" layouts
(see engine/root/testing/random_vlm_families.py for the cached build and for what vLLM's video input needs per family).

Each writer fills a temp dir with the family's real transformers config, model (random weights, safetensors, tensor
names as in the released checkpoints), processor, image processor and video processor classes at tiny sizes, a BPE
tokenizer with the family's special tokens and a chat template that renders the family's video placeholder.
"""

from __future__ import annotations

from pathlib import Path

from capeval.testing.random_vlm_families import HEAD_DIM, randomize_and_save, rename_weights, text_dims, tokenizer_for

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
    tok = tokenizer_for(spec, LLAVA_SPECIAL_TOKENS, eos="<|im_end|>")
    tok.chat_template = template
    return tok, {t: tok.convert_tokens_to_ids(t) for t in LLAVA_SPECIAL_TOKENS}


def _siglip_vision(side: int = LLAVA_SIDE) -> dict:
    return dict(model_type="siglip_vision_model", hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                num_attention_heads=64 // HEAD_DIM, image_size=side, patch_size=LLAVA_PATCH,
                vision_use_head=False)  # fmt: skip


def write_llava_onevision(tmp: Path, spec: dict) -> None:
    from transformers import LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration, LlavaOnevisionProcessor
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil)
    from transformers.models.llava_onevision.video_processing_llava_onevision import LlavaOnevisionVideoProcessor

    tok, ids = _llava_tokenizer(spec, LLAVA_OV_CHAT_TEMPLATE)
    text = text_dims(len(tok), ids) | {"model_type": "qwen2"}
    # anyres tiles of one or two LLAVA_SIDE squares per side, as the released models tile 384 px squares
    pinpoints = [[LLAVA_SIDE * a, LLAVA_SIDE * b] for a in (1, 2) for b in (1, 2)]
    cfg = LlavaOnevisionConfig(
        text_config=text, vision_config=_siglip_vision(), image_token_index=ids["<image>"],
        video_token_index=ids["<video>"], vision_feature_select_strategy="full", vision_feature_layer=-1,
        image_grid_pinpoints=pinpoints, vision_aspect_ratio="anyres_max_9", tie_word_embeddings=False,
    )  # fmt: skip
    randomize_and_save(LlavaOnevisionForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    # the OneVision models use SigLIP without its pooling head (features come from the patch tokens)
    rename_weights(tmp, {"vision_tower.": "vision_tower.vision_model."}, drop=("vision_tower.head.",))
    size = {"height": LLAVA_SIDE, "width": LLAVA_SIDE}
    processor = LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessorPil(size=size, image_grid_pinpoints=pinpoints),
        video_processor=LlavaOnevisionVideoProcessor(size=size), tokenizer=tok,
        num_image_tokens=(LLAVA_SIDE // LLAVA_PATCH) ** 2, vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9", chat_template=LLAVA_OV_CHAT_TEMPLATE,
    )  # fmt: skip
    processor.save_pretrained(str(tmp))


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


def write_llava_next_video(tmp: Path, spec: dict) -> None:
    from transformers import LlavaNextVideoConfig, LlavaNextVideoForConditionalGeneration, LlavaNextVideoProcessor
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil
    from transformers.models.llava_next_video.video_processing_llava_next_video import LlavaNextVideoVideoProcessor

    tok = tokenizer_for(spec, LLAVA_NEXT_VIDEO_SPECIAL_TOKENS, eos="</s>")
    tok.chat_template = LLAVA_NEXT_VIDEO_CHAT_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in LLAVA_NEXT_VIDEO_SPECIAL_TOKENS}
    text = text_dims(len(tok), ids, eos="</s>") | {"model_type": "llama"}
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
    randomize_and_save(LlavaNextVideoForConditionalGeneration(cfg), tmp, spec["seed"], ids["</s>"])
    rename_weights(tmp, {"vision_tower.": "vision_tower.vision_model."})
    side = LLAVA_NEXT_VIDEO_SIDE
    size, crop = {"shortest_edge": side}, {"height": side, "width": side}
    LlavaNextVideoProcessor(
        video_processor=LlavaNextVideoVideoProcessor(size=size, crop_size=crop),
        image_processor=LlavaNextImageProcessorPil(size=size, crop_size=crop, image_grid_pinpoints=pinpoints),
        tokenizer=tok, patch_size=LLAVA_NEXT_VIDEO_PATCH, vision_feature_select_strategy="default",
        num_additional_image_tokens=1, chat_template=LLAVA_NEXT_VIDEO_CHAT_TEMPLATE,
    ).save_pretrained(str(tmp))  # fmt: skip


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


def write_internvl3(tmp: Path, spec: dict) -> None:
    from transformers import InternVLConfig, InternVLForConditionalGeneration, InternVLProcessor
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import GotOcr2ImageProcessorPil
    from transformers.models.internvl.video_processing_internvl import InternVLVideoProcessor

    from transformers import PreTrainedTokenizerFast

    trained = tokenizer_for(spec, INTERNVL_SPECIAL_TOKENS, eos="<|im_end|>")
    # the processor finds its tokens by these names (the released tokenizer_config's extra_special_tokens)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=trained.backend_tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="<|im_end|>",
        pad_token="<pad>", model_max_length=1 << 20,
        extra_special_tokens={"start_image_token": "<img>", "end_image_token": "</img>",
                              "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>"},
    )  # fmt: skip
    tok.chat_template = INTERNVL_CHAT_TEMPLATE
    ids = {t: tok.convert_tokens_to_ids(t) for t in INTERNVL_SPECIAL_TOKENS}
    text = text_dims(len(tok), ids) | {"model_type": "qwen2"}
    vision = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=64 // HEAD_DIM,
                  image_size=[INTERNVL_SIDE] * 2, patch_size=[INTERNVL_PATCH] * 2)  # fmt: skip
    cfg = InternVLConfig(vision_config=vision, text_config=text, image_token_id=ids["<IMG_CONTEXT>"],
                         image_seq_length=INTERNVL_TOKENS_PER_FRAME, downsample_ratio=0.5,
                         vision_feature_layer=-1, tie_word_embeddings=False)  # fmt: skip
    randomize_and_save(InternVLForConditionalGeneration(cfg), tmp, spec["seed"], ids["<|im_end|>"])
    size = {"height": INTERNVL_SIDE, "width": INTERNVL_SIDE}
    InternVLProcessor(
        image_processor=GotOcr2ImageProcessorPil(size=size, crop_to_patches=False, max_patches=1),
        video_processor=InternVLVideoProcessor(size=size), tokenizer=tok,
        image_seq_length=INTERNVL_TOKENS_PER_FRAME, chat_template=INTERNVL_CHAT_TEMPLATE,
    ).save_pretrained(str(tmp))  # fmt: skip
