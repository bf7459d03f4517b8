"""Caption prompts named after DREAM-1K's captioning setting: capeval's own wording, registered through
JudgeProtocol.caption_prompts so that a sweep names them by id like capeval's generic prompts.

The official captioning prompt is not shipped: it is the pack's `caption/describe` (../shared/protocols/autodq.toml,
the instruction every DREAM-1K clip carries in the release), which a sweep reads from the pack:
`[[prompts]] pack = ".../autodq.toml"`, `prompt = "caption/describe"`."""

from __future__ import annotations

from capeval.engine.prompts_library import CaptionPrompt

#: the official captioning prompt's id in the AutoDQ pack
OFFICIAL_CAPTION_PROMPT = "caption/describe"

CAPTION_PROMPTS = (
    CaptionPrompt(
        "dream1k",
        "Describe what happens in this video clip in detail: every subject's actions and movements, in the order "
        "they happen, and how they interact.",
        "capeval: DREAM-1K captioning, a dynamic event-centred description (the official prompt is the AutoDQ "
        "pack's caption/describe)"),
)
