"""Tiny random-weight decoder models that the vLLM CPU build loads like any Hugging Face checkpoint.

Tests and benchmarks need a real engine (tokenizer, scheduler, prefix cache, structured outputs) but no real weights:
the machine has no network and no GPU. A model here is a Llama architecture with seeded random weights plus a
byte-level BPE tokenizer trained on real caption/question text (so token counts look like real prompts), saved with a
chat template. Builds are deterministic and idempotent: a directory is reused when its recorded build spec matches.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from capeval.adapters.checkpoints import build_once, staged_build

BUILD_SPEC_VERSION = 1

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
# Role markers are special tokens so a prompt's shared prefix tokenizes the same way in every request.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_WORDS = (
    "a the man woman child dog cat car street room table camera video scene person people walks runs holds looks "
    "red blue green white black small large left right behind front near outdoor indoor light dark bright slowly "
    "quickly moves turns opens closes sits stands kitchen park road tree building window door sky water ball shirt "
    "what where when why how many which color is are does doing in on at with of to from and then while during"
).split()


def iter_corpus_texts(paths: Sequence[str | os.PathLike] = (), *, max_chars_per_file: int = 400_000) -> Iterator[str]:
    """Yield text lines from real data files: caption JSONL (`caption`), question JSONL
    (video id -> list of {question, answer}), or plain text. Directories are walked (sorted, for determinism); each
    file contributes its first `max_chars_per_file` characters so every source is represented."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in (".jsonl", ".txt")))
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"corpus path not found: {p}")
    for f in files:
        seen = 0
        with open(f, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                texts = _texts_from_line(line) if f.suffix == ".jsonl" else [line]
                for t in texts:
                    seen += len(t)
                    yield t
                if seen >= max_chars_per_file:
                    break


def _texts_from_line(line: str) -> list[str]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return [line]
    out: list[str] = []
    if isinstance(obj, dict):
        for key in ("caption", "question", "annotation"):
            if isinstance(obj.get(key), str):
                out.append(obj[key])
        for v in obj.values():  # question files: {video_id: [{question, answer}, ...]}
            if isinstance(v, list):
                out.extend(f"{q.get('question', '')} {q.get('answer', '')}" for q in v if isinstance(q, dict))
    return out


def generated_corpus(n_lines: int = 20_000, seed: int = 0) -> Iterator[str]:
    """Fallback corpus when no real data is available: seeded word salad over a captioning vocabulary."""
    rng = random.Random(seed)
    for _ in range(n_lines):
        yield " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 40)))


def train_bpe_tokenizer(texts: Iterable[str], vocab: int, special_tokens: Sequence[str], eos_token: str):
    """A byte-level BPE tokenizer trained on `texts`, as a transformers fast tokenizer (unk/bos/pad: <unk>, <s>,
    <pad>; `eos_token` is the chat turn terminator, so a generation stops at the end of a turn)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token=eos_token,
        pad_token="<pad>",
        model_max_length=1 << 20,
    )


def build_tiny_lm(
    out_dir: str | os.PathLike,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 2,
    vocab: int = 4096,
    intermediate: int | None = None,
    max_position: int = 4096,
    seed: int = 0,
    corpus: Sequence[str | os.PathLike] = (),
) -> Path:
    """Build (or reuse) a random-weight Llama model + trained tokenizer in `out_dir`; return the directory.

    `corpus` lists files/directories of real text for the tokenizer (see iter_corpus_texts); empty means a generated
    corpus. vLLM's CPU attention needs head_dim >= 32, checked here so the error names the cause.
    """
    out = Path(out_dir)
    if hidden % heads or hidden // heads < 32:
        raise ValueError(f"hidden={hidden} / heads={heads} gives head_dim < 32 (or not integral); vLLM CPU needs >= 32")
    spec = {
        "version": BUILD_SPEC_VERSION,
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "vocab": vocab,
        "intermediate": intermediate or 4 * hidden,
        "max_position": max_position,
        "seed": seed,
        "corpus": [str(Path(p).resolve()) for p in corpus],
    }
    return build_once(out, spec, lambda: _build(out, spec, corpus))


def _build(out: Path, spec: dict, corpus: Sequence[str | os.PathLike]) -> None:
    hidden, layers, heads, vocab, seed = (spec[k] for k in ("hidden", "layers", "heads", "vocab", "seed"))
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    # Build in a sibling temp dir and rename: a killed build never leaves a directory that looks complete.
    with staged_build(out, spec) as tmp:  # renamed into place when complete
        texts = iter_corpus_texts(corpus) if corpus else generated_corpus()  # the seed is for weights only
        tokenizer = train_bpe_tokenizer(texts, vocab, SPECIAL_TOKENS, eos_token="<|end|>")
        tokenizer.chat_template = CHAT_TEMPLATE
        tokenizer.save_pretrained(str(tmp))
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tmp))
        cfg = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden,
            intermediate_size=spec["intermediate"],
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            max_position_embeddings=spec["max_position"],
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            tie_word_embeddings=False,
            dtype="float32",
        )
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        with torch.no_grad():  # default init is tiny (std 0.02); widen it so logits are not all near-uniform
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5)
        model.save_pretrained(str(tmp), safe_serialization=True)


def count_parameters(model_dir: str | os.PathLike) -> int:
    """Parameter count read from the saved safetensors headers (no weights loaded)."""
    total = 0
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        for name, meta in header.items():
            if name != "__metadata__":
                size = 1
                for d in meta["shape"]:
                    size *= d
                total += size
    return total


def default_corpus(shared_data: str | os.PathLike) -> list[Path]:
    """Real text from the shared data folder: a release's gpt-4o captions and a set of short
    questions (a few MB)."""
    root = Path(shared_data)
    paths = [root / "capability" / "captions" / "gpt-4o-0806", root / "vdc" / "short.jsonl"]
    return [p for p in paths if p.exists()]
