"""Caption prompts by id: capeval's built-in prompts (its own wording), prompts read from a prompt pack, and the
user's own text.

Sweep files name prompts by id (`prompts = ["detailed", "brief"]`) or define them (`[[prompts]]`):

    [[prompts]]                              # the user's own text (or `file = "prompt.txt"`)
    id = "mine"
    text = "Describe the clip."
    image = "Describe the picture."          # optional variant for image items

    [[prompts]]                              # prompts read from a pack at run time (never copied into capeval)
    id = "official"
    pack = "../shared/protocols/<name>.toml"
    video = "caption/video"                  # pack prompt ids per media type (`prompt = ...` for a single one)
    image = "caption/image"

A prompt may carry an image and a video variant; `text_for(media_type)` picks the one for an item (a benchmark may
ask images and videos differently). `key_text` (every variant, and the system message) enters caption keys, so editing
a text makes new keys; old captions stay in the store and are simply no longer matched.

Built-in texts are capeval's own; none is a benchmark's official prompt. The generic ones are BUILTIN here; those
named after a benchmark's captioning settings are declared by its protocol (JudgeProtocol.caption_prompts) and
join on first use (`builtin_prompts`). For an official prompt read it from the
benchmark's pack (`[[prompts]] pack = ...`), which keeps its text out of this project.

Segmental mode (`segmental=True`) captions a long video segment by segment (the frame spec's segments:
`segments:length=60,...` or scene cuts `segments:at=...`); the stage passes the captions of the previous segments
once, in `CaptionRequest.context`, which each captioner puts before the prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from capeval.engine.packs import PackError, load_pack
from capeval.engine.registry import lookup, names

MEDIA_TYPES = ("video", "image")


class PromptError(ValueError):
    """A prompt definition that cannot be used; the message names where it came from."""


@dataclass(frozen=True)
class CaptionPrompt:
    id: str
    text: str  # the video prompt (and the prompt for any media type without its own variant)
    source: str  # where the text comes from
    verbatim: bool = False  # True only for texts read from an official pack at run time
    segmental: bool = False  # segmental mode: conditioned on the previous segments' captions
    image_text: str | None = None  # variant for image items
    system: str | None = None  # system message, when the source gives one (packs)

    def text_for(self, media_type: str | None) -> str:
        """The instruction for an item of this media type ("image" or "video"; None = video)."""
        if media_type == "image" and self.image_text is not None:
            return self.image_text
        return self.text

    @property
    def key_text(self) -> str:
        """Everything about the prompt that changes captions: enters caption and cell keys."""
        if self.image_text is None and self.system is None:
            return self.text  # unchanged keys for single-text prompts
        return json.dumps({"video": self.text, "image": self.image_text, "system": self.system}, sort_keys=True)

    def render(self, context: str | None = None, media_type: str | None = None) -> str:
        """The text sent to the captioner; `context` = previous segments' captions (segmental prompts only)."""
        text = self.text_for(media_type)
        if not self.segmental or not context:
            return text
        return f"Captions of the previous segments of this video:\n{context}\n\n{text}"


_DETAILED_VIDEO = (
    "Give a thorough description of this video as one flowing paragraph (no lists). Go through the events in the "
    "order they occur and say what each person or animal does. Name every visible object with its count, colour "
    "and where it sits relative to the others. Describe the setting, how the camera moves (pans, tilts, zooms, "
    "tracking shots) and the visual style (live action, animation, effects, archival look). Quote any on-screen "
    "text, and name anyone you recognise."
)
_DETAILED_IMAGE = (
    "Give a thorough description of this image as one flowing paragraph (no lists). Name every visible object with "
    "its count, colour and where it sits relative to the others. Describe the setting, the camera angle (eye level, "
    "from above, from below, tilted) and the visual style (photograph, drawing, animation, effects, archival look). "
    "Quote any visible text, and name anyone you recognise."
)

BUILTIN: dict[str, CaptionPrompt] = {
    p.id: p
    for p in [
        CaptionPrompt("detailed", _DETAILED_VIDEO,
                      "capeval: covers objects, counts, colours, positions, events, camera, style, on-screen text and "
                      "people; image and video variants",
                      image_text=_DETAILED_IMAGE),
        CaptionPrompt("brief", "Briefly describe this video in one sentence.",
                      "capeval: a short-caption baseline", image_text="Briefly describe this image in one sentence."),
    ]
}

#: Built-in prompts plus those a sweep file defined in this process (register_prompts); what get_prompt reads.
PROMPTS: dict[str, CaptionPrompt] = dict(BUILTIN)


def builtin_prompts() -> dict[str, CaptionPrompt]:
    """capeval's generic built-in prompts, then every registered protocol's (JudgeProtocol.caption_prompts), by id.
    Loads the protocols: called when an id is not among the prompts already known."""
    found = dict(BUILTIN)
    for name in names("protocol"):
        for p in lookup("protocol", name).caption_prompts:
            if found.setdefault(p.id, p).key_text != p.key_text:
                raise PromptError(f"caption prompt id {p.id!r} of protocol {name!r} is already defined with another "
                                  f"text ({found[p.id].source})")
    return found


def with_builtin_prompts() -> None:
    """Make every built-in prompt (the protocols' too) visible to get_prompt and to register_prompts' clash check."""
    for pid, p in builtin_prompts().items():
        PROMPTS.setdefault(pid, p)


def get_prompt(prompt_id: str) -> CaptionPrompt:
    if prompt_id not in PROMPTS:
        with_builtin_prompts()
    try:
        return PROMPTS[prompt_id]
    except KeyError:
        raise KeyError(f"unknown caption prompt {prompt_id!r}; known: {', '.join(sorted(PROMPTS))}") from None


def register_prompts(prompts: dict[str, CaptionPrompt]) -> None:
    """Make user/pack prompts visible to get_prompt (the caption stage looks prompts up by id). An id may be
    registered again only with the same texts: one id never means two prompts within a process."""
    with_builtin_prompts()
    for pid, p in prompts.items():
        old = PROMPTS.get(pid)
        if old is not None and old.key_text != p.key_text:
            raise PromptError(f"caption prompt id {pid!r} is already defined with another text ({old.source})")
        PROMPTS[pid] = p


_ENTRY_KEYS = {"id", "text", "file", "image", "video", "pack", "prompt", "segmental", "system"}


def prompt_from_entry(entry: dict[str, Any], base_dir: Path, where: str = "prompts") -> CaptionPrompt:
    """A prompt from one `[[prompts]]` table (see the module doc); PromptError names `where` and the field."""
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise PromptError(f"{where}: unknown key(s) {sorted(unknown)} (allowed: {', '.join(sorted(_ENTRY_KEYS))})")
    pid = entry.get("id")
    if not isinstance(pid, str) or not pid.strip():
        raise PromptError(f"{where}.id: a prompt needs an id (text)")
    for k in ("text", "file", "image", "video", "pack", "prompt", "system"):
        if k in entry and not isinstance(entry[k], str):
            raise PromptError(f"{where}.{k}: expected text, got {type(entry[k]).__name__}")
    segmental = entry.get("segmental", False)
    if not isinstance(segmental, bool):
        raise PromptError(f"{where}.segmental: expected true or false")
    if "pack" in entry:
        if "text" in entry or "file" in entry:
            raise PromptError(f"{where}: give either `pack` (with prompt ids) or `text`/`file`, not both")
        path = Path(entry["pack"]).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            pack = load_pack(path)
            video_id = entry.get("video") or entry.get("prompt") or (pid if pack.has(pid) else None)
            if video_id is None:
                raise PromptError(f"{where}: pack {path} has no prompt {pid!r}; name one with `video`/`prompt` "
                                  f"(it has {sorted(pack.prompts)})")
            video = pack.prompt(video_id)
            image = pack.prompt(entry["image"]) if "image" in entry else None
        except PackError as exc:
            raise PromptError(f"{where}: {exc}") from None
        # verbatim: a pack's text is sent exactly as the official code sends it (trailing spaces included)
        image_text = image.user if image else None
        return CaptionPrompt(pid, video.user, f"pack {path} ({pack.digest[:12]}): {video_id}"
                             + (f", image: {entry['image']}" if image else ""), verbatim=True,
                             segmental=segmental, image_text=image_text, system=entry.get("system", video.role_system))
    if "text" in entry and "file" in entry:
        raise PromptError(f"{where}: give `text` or `file`, not both")
    if "file" in entry:
        path = Path(entry["file"]).expanduser()
        path = path if path.is_absolute() else base_dir / path
        if not path.is_file():
            raise PromptError(f"{where}.file: prompt file not found: {path}")
        text, source = path.read_text(encoding="utf-8").strip(), f"file {path}"
    else:
        text, source = entry.get("text") or entry.get("video"), "sweep file"
    if not text or not text.strip():
        raise PromptError(f"{where}: a prompt needs non-empty `text`, `file`, `video` or `pack`")
    image_text = entry.get("image")
    if image_text is not None and not image_text.strip():
        raise PromptError(f"{where}.image: empty text")
    base = CaptionPrompt(pid, text.strip(), source, segmental=segmental, system=entry.get("system"))
    return replace(base, image_text=image_text.strip() if image_text else None)


def texts_for_media(prompt_id: str, media_types: dict[str, str]) -> dict[str, str]:
    """{video_id: instruction} for a dataset's media (LoadedDataset.media_types): the image variant for images,
    the video text for videos. What a caption stage sends per item."""
    prompt = get_prompt(prompt_id)
    return {vid: prompt.text_for(mt) for vid, mt in media_types.items()}
