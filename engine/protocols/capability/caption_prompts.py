"""Caption prompts named after CAPability's captioning settings: capeval's own wording (none is an official prompt; an
official one is read from a pack), registered through JudgeProtocol.caption_prompts so that a sweep names them by
id like capeval's generic prompts."""

from __future__ import annotations

from capeval.engine.prompts_library import BUILTIN, CaptionPrompt

CAPTION_PROMPTS = (
    # kept for sweep files written before the official text was removed: capeval's wording, video only
    CaptionPrompt("capability_video", BUILTIN["detailed"].text,
                  "capeval: the video variant of `detailed` (the official prompt is read from a pack)"),
)
