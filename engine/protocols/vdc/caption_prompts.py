"""Caption prompts for VDC's five kinds, in capeval's own wording (none is an official prompt), registered through
JudgeProtocol.caption_prompts so that a sweep names them by id. Each id names its kind, so a caption made with it is
judged on that kind's questions only (kinds.py).

The official pools (16-24 prompts per kind) are read from the official pack at run time, e.g. `[[prompts]] pack =
".../vdc.toml"`, `prompt = "caption/detailed/00"`: the official harness draws ONE pool entry at random per video
(`random.choice` in the lmms-eval task), so a single pack prompt reproduces one of its draws, not the mix."""

from __future__ import annotations

from capeval.engine.prompts_library import CaptionPrompt

CAPTION_PROMPTS = (
    CaptionPrompt(
        "vdc_short",
        "Summarize this video in a single sentence: who or what it shows and what happens.",
        "capeval: judged on VDC's short questions only (a prompt id naming no kind: all five kinds)"),
    CaptionPrompt(
        "vdc_detailed",
        "Describe this video in detail, in several sentences: the people, animals and objects, what they do and in "
        "what order, the setting, and how the camera shows it.",
        "capeval: judged on VDC's detailed questions only (a prompt id naming no kind: all five kinds)"),
    CaptionPrompt(
        "vdc_background",
        "Describe the background and setting of this video in detail: the place, the objects around, the weather "
        "and light, and the time of day.",
        "capeval: judged on VDC's background questions only (a prompt id naming no kind: all five kinds)"),
    CaptionPrompt(
        "vdc_main_object",
        "Describe the main subject of this video in detail: what it is and looks like, where it is, and how it "
        "moves and acts over the course of the video.",
        "capeval: judged on VDC's main_object questions only (a prompt id naming no kind: all five kinds)"),
    CaptionPrompt(
        "vdc_camera",
        "Describe how this video is filmed: the shot sizes and angles, the camera's movements and their order, "
        "cuts and transitions, and what the framing keeps in view.",
        "capeval: judged on VDC's camera questions only (a prompt id naming no kind: all five kinds)"),
)
