"""Caption prompts by id: the prompts the published protocols ask captioners to answer.

Sweep files name prompts by id (`prompts = ["capquiz_standard", "capability_video"]`). Each prompt records where
its text comes from and whether it is `verbatim` (copied from the benchmark's released code or paper) or a
paraphrase written from the paper's description (`verbatim=False`): compare numbers across papers only with
verbatim prompts. The prompt text is part of every caption's content key, so editing a text here makes new keys
(old captions stay in the store, untouched, and are simply no longer matched).

LVCap's segmental mode (`segmental=True`) captions a long video segment by segment; the stage passes the captions of
the previous segments in `CaptionRequest.context` and `render()` puts them before the instruction.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CaptionPrompt:
    id: str
    text: str
    source: str  # benchmark and where the text comes from
    verbatim: bool  # False: a paraphrase of the paper's description, not the released text
    segmental: bool = False  # LVCap segmental mode: conditioned on the previous segments' captions

    def render(self, context: str | None = None) -> str:
        """The text sent to the captioner; `context` = previous segments' captions (segmental prompts only)."""
        if not self.segmental or not context:
            return self.text
        return f"Captions of the previous segments of this video:\n{context}\n\n{self.text}"


_CAPABILITY_VIDEO = (
    "Please describe the video in detail. Your description should follow these rules:\n"
    "a) You should describe each events in the video in order, especially focusing on the behavior and action of "
    "characters, including people, animals.\n"
    "b) You should describe each object in the video in detail, including its name, number, color, and spatial "
    "relationship between objects.\n"
    "c) You should describe the scene of the video.\n"
    "d) You should describe the camera movement when shooting this video, especially the direction, such as pan "
    "left, track right, tilt up, boom down, zoom in, dolly out, and so on.\n"
    "e) You should describe the style of the video, such as realistic, animated, special-effect, old-fashioned and "
    "so on.\n"
    "f) If there are any texts in the video, you should describe the text content.\n"
    "g) If you know the character in the video, you should tell his or her name.\n"
    "Directly output your detailed description in a elaborate paragraph, instead of itemizing them in list form. "
    "Your description: "
)

PROMPTS: dict[str, CaptionPrompt] = {
    p.id: p
    for p in [
        CaptionPrompt(
            "capquiz_standard",
            "Describe this video in detail.",
            "CapQuiz: the standard captioning instruction",
            verbatim=True,
        ),
        CaptionPrompt(
            "capquiz_report",
            "Write a detailed report of this video. Cover, in order: the setting and background; every visible "
            "object or person with its appearance, colour, count and position; each action and event in the order "
            "it happens, including where things move; the camera's viewpoint and movement; and any text on screen. "
            "Describe only what is visible.",
            "CapQuiz: the detailed-report prompt (paraphrased from the paper's description)",
            verbatim=False,
        ),
        CaptionPrompt(
            "capability_video",
            _CAPABILITY_VIDEO,
            "CAPability: video prompt of the released inference code (Gemini/Qwen variant)",
            verbatim=True,
        ),
        CaptionPrompt(
            "vidcapbench_miradata",
            "Describe this video as a structured caption with these parts: a short caption; the main object; the "
            "background; the visual style; the camera movement; and a dense caption of everything that happens.",
            "VidCapBench caption format following MiraData's structured captions (paraphrase)",
            verbatim=False,
        ),
        CaptionPrompt(
            "vidcapbench_dream1k",
            "Describe the video in detail, focusing on the sequence of actions and events of every subject, in the "
            "order they happen.",
            "VidCapBench caption format following DREAM-1K's event-centred descriptions (paraphrase)",
            verbatim=False,
        ),
        CaptionPrompt(
            "vidcapbench_vript",
            "Describe this video clip like a script: state the shot type and camera movement, then narrate the "
            "content, subjects, actions and scene in detail.",
            "VidCapBench caption format following Vript's script-like captions (paraphrase)",
            verbatim=False,
        ),
        CaptionPrompt(
            "vidcapbench_hunyuan",
            "Describe this video for a text-to-video model: the main subject and its appearance, its motion, the "
            "environment, the lighting and atmosphere, the shot type, the camera movement and the visual style.",
            "VidCapBench caption format following HunyuanVideo's structured captions (paraphrase)",
            verbatim=False,
        ),
        CaptionPrompt(
            "lvcap_segment",
            "Describe this segment of the video in detail: the scene, the subjects and every event in order. Keep "
            "the names and descriptions of subjects consistent with the previous segments, and do not repeat what "
            "they already said.",
            "LVCap-Eval segmental captioning, conditioned on previous segments' captions (paraphrase)",
            verbatim=False,
            segmental=True,
        ),
        CaptionPrompt(
            "brief",
            "Briefly describe this video in one sentence.",
            "capeval: a short-caption baseline (not from a benchmark)",
            verbatim=True,
        ),
    ]
}


def get_prompt(prompt_id: str) -> CaptionPrompt:
    try:
        return PROMPTS[prompt_id]
    except KeyError:
        raise KeyError(f"unknown caption prompt {prompt_id!r}; known: {', '.join(sorted(PROMPTS))}") from None
