"""Caption prompts named after VidCapBench's captioning settings: capeval's own wording (none is an official prompt; an
official one is read from a pack), registered through JudgeProtocol.caption_prompts so that a sweep names them by
id like capeval's generic prompts."""

from __future__ import annotations

from capeval.engine.prompts_library import CaptionPrompt

CAPTION_PROMPTS = (
    CaptionPrompt(
        "vidcapbench_miradata",
        "Describe this video as a structured caption with these parts: a short caption; the main object; the "
        "background; the visual style; the camera movement; and a dense caption of everything that happens.",
        "capeval: VidCapBench caption format after MiraData's structured captions"),
    CaptionPrompt(
        "vidcapbench_dream1k",
        "Describe the video in detail, focusing on the sequence of actions and events of every subject, in the "
        "order they happen.",
        "capeval: VidCapBench caption format after DREAM-1K's event-centred descriptions"),
    CaptionPrompt(
        "vidcapbench_vript",
        "Describe this video clip like a script: state the shot type and camera movement, then narrate the "
        "content, subjects, actions and scene in detail.",
        "capeval: VidCapBench caption format after Vript's script-like captions"),
    CaptionPrompt(
        "vidcapbench_hunyuan",
        "Describe this video for a text-to-video model: the main subject and its appearance, its motion, the "
        "environment, the lighting and atmosphere, the shot type, the camera movement and the visual style.",
        "capeval: VidCapBench caption format after HunyuanVideo's structured captions"),
)
