"""Caption prompts named after LVCap-Eval's captioning settings: capeval's own wording (none is an official prompt; an
official one is read from a pack), registered through JudgeProtocol.caption_prompts so that a sweep names them by
id like capeval's generic prompts."""

from __future__ import annotations

from capeval.engine.prompts_library import CaptionPrompt

CAPTION_PROMPTS = (
    CaptionPrompt(
        "lvcap_segment",
        "Describe this segment of the video in detail: the scene, the subjects and every event in order. Keep "
        "the names and descriptions of subjects consistent with the previous segments, and do not repeat what "
        "they already said.",
        "capeval: LVCap-Eval segmental captioning, conditioned on previous segments' captions",
        segmental=True),
)
