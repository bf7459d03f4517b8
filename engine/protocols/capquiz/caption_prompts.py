"""Caption prompts named after CapQuiz's captioning settings: capeval's own wording (none is an official prompt; an
official one is read from a pack), registered through JudgeProtocol.caption_prompts so that a sweep names them by
id like capeval's generic prompts."""

from __future__ import annotations

from capeval.engine.prompts_library import CaptionPrompt

CAPTION_PROMPTS = (
    CaptionPrompt("capquiz_standard", "Describe this video in detail.",
                  "capeval: the plain detailed-description instruction CapQuiz uses as its standard setting"),
    CaptionPrompt(
        "capquiz_report",
        "Write a detailed report of this video. Cover, in order: the setting and background; every visible "
        "object or person with its appearance, colour, count and position; each action and event in the order "
        "it happens, including where things move; the camera's viewpoint and movement; and any text on screen. "
        "Describe only what is visible.",
        "capeval: a detailed-report prompt written from CapQuiz's description of its report setting"),
)
