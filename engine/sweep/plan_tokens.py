"""Counting for `capeval plan` (engine/sweep/plan.py): prompt tokens, the completion a request is expected to take,
captions that do not exist yet, and the share of prompt tokens a server's prefix cache would serve.

Tokens are counted with the judge's own tokenizer when one is on disk (`--tokenizer PATH`, or a judge whose `model`
param is a local model folder, as the vLLM judge's is), with its chat template when it has one, as the vLLM judge
renders a prompt; otherwise they are estimated as characters / 4 (about right for English with GPT-style and Llama
tokenizers; servers add a few template tokens per message on top).
"""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa

CHARS_PER_TOKEN = 4
PREFIX_BLOCK_CHARS = 64  # about 16 tokens: vLLM's default KV block on GPUs


class TokenCounter:
    def __init__(self, tokenizer_path: str | Path | None = None):
        self.tokenizer = None
        self.how = f"characters / {CHARS_PER_TOKEN} (no local tokenizer for this judge; pass --tokenizer PATH)"
        if tokenizer_path is not None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path), local_files_only=True)
            self.how = f"tokenizer {tokenizer_path}" + (" with its chat template" if self._template else "")
        self._memo: dict[str, int] = {}

    @property
    def _template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def text(self, text: str) -> int:
        if self.tokenizer is None:
            return math.ceil(len(text) / CHARS_PER_TOKEN)
        if text not in self._memo:
            self._memo[text] = len(self.tokenizer.encode(text, add_special_tokens=False))
        return self._memo[text]

    def prompt(self, system: str | None, user: str) -> int:
        if self.tokenizer is None:
            return math.ceil((len(system or "") + len(user)) / CHARS_PER_TOKEN)
        if self._template:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            return len(self.tokenizer.encode(text, add_special_tokens=False))
        return len(self.tokenizer.encode(f"{system}\n\n{user}" if system else user))


def judge_tokenizer(judge) -> str | None:
    """A local tokenizer folder for `judge` (a ComponentSpec): its `model` param when that is a folder holding a
    tokenizer; None otherwise (an API model, a hub id not on disk)."""
    model = judge.params.get("model")
    if isinstance(model, str) and Path(model).is_dir() and any(Path(model).glob("tokenizer*")):
        return model
    return None


def typical_completion(choices, max_tokens: int, counter: TokenCounter) -> tuple[int, bool]:
    """(tokens, measured-or-known): a fixed choice set takes its longest choice; anything else is assumed to take
    its whole `max_tokens` (False: an assumption, the upper bound), unless a measurement replaces it."""
    if choices:
        return max(1, max(counter.text(str(c)) for c in choices)), True
    return int(max_tokens), False


class PrefixCache:
    """What a never-evicting prefix cache serves, in whole PREFIX_BLOCK_CHARS blocks of the prompt text (system,
    then user) in sending order: the share of each prompt's characters whose whole prefix was sent before."""

    def __init__(self):
        self.seen: set[int] = set()

    def cached_share(self, system: str | None, user: str) -> float:
        text = f"{system}\x1e{user}" if system else user
        h, cached, hit = 0, 0, True
        for start in range(0, len(text) - PREFIX_BLOCK_CHARS + 1, PREFIX_BLOCK_CHARS):
            h = hash((h, text[start : start + PREFIX_BLOCK_CHARS]))
            if hit and h in self.seen:
                cached += PREFIX_BLOCK_CHARS
            else:
                hit = False
                self.seen.add(h)
        return cached / len(text) if text else 0.0


def placeholder_captions(cell, videos: list[str], max_tokens: int) -> pa.Table:
    """CAPTIONS rows standing in for captions not made yet: one per video, each as long as the captioner may write
    (`max_tokens` tokens, at CHARS_PER_TOKEN characters each: the longest the judge prompts can get). The text names
    the caption cell and video, so two cells' prompts differ as the real ones would."""
    from capeval.engine import schemas

    n_chars = CHARS_PER_TOKEN * int(max_tokens)
    rows = []
    for vid in videos:
        head = f"[{cell.captioner.display} {cell.prompt_id} {cell.frame_spec} {vid}] "
        text = (head + "the caption of this video " * (n_chars // 26 + 1))[:n_chars]
        rows.append({"caption_key": f"plan:{cell.captioner.display}:{cell.prompt_id}:{cell.frame_spec}:{vid}",
                     "captioner": cell.captioner.name, "prompt_id": cell.prompt_id, "frame_spec": cell.frame_spec,
                     "video_id": vid, "text": text})
    return schemas.conform(pa.Table.from_pylist(rows), schemas.CAPTIONS) if rows else schemas.CAPTIONS.empty_table()


def placeholder_frames(videos: list[str], spec: str) -> pa.Table:
    """FRAMES rows for a judge that sees frames: the request is rendered as it would be (the frames are not
    decoded; none is sent)."""
    from capeval.engine import schemas

    rows = [{"frames_key": f"plan:{vid}:{spec}", "video_id": vid, "frame_spec": spec, "path": f"plan:{vid}"}
            for vid in videos]
    return schemas.conform(pa.Table.from_pylist(rows), schemas.FRAMES) if rows else schemas.FRAMES.empty_table()


def frames_per_request(spec: str | None) -> int | None:
    """Frames a spec such as uniform:8 / linspace:32 asks for; None when it depends on the video (fps:1, ...)."""
    if not spec:
        return None
    from capeval.engine.frames.sampling import FrameSpec, FrameSpecError

    try:
        n = getattr(FrameSpec.parse(spec), "n", None)
    except FrameSpecError:
        return None
    return n if isinstance(n, int) else None
