"""VC-Inspector prompts: a multimodal judge sees the video frames and the caption and scores the caption's factual
quality 1-5 with an explanation, as JSON {"score": 1-5, "explanation": ...}.

Frames: pass `frames=` (an engine.schemas.FRAMES table) to build_requests; the request row stores the frames file
path and frames_key in its context (the key doubles as the images digest in the request key) and the runner loads
JPEG bytes only when sending. A caption whose frames are missing gives a MISSING verdict row."""

from __future__ import annotations

import json

from engine.protocols.base import Rendered

SYSTEM = (
    "You are an expert video caption evaluator. You are shown frames sampled from a video and a caption of that "
    "video. Check the caption against what the frames show: objects, attributes, actions, counts and scene. Rate "
    "the caption's factual accuracy and completeness from 1 (mostly wrong or unrelated) to 5 (fully accurate), and "
    "briefly explain which details are wrong or missing."
)
SCORE_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "explanation": {"type": "string",
                                                                                            "maxLength": 400}},
    "required": ["score", "explanation"],
})


def frames_index(frames) -> dict[tuple[str, str], dict]:
    if frames is None:
        return {}
    return {(r["video_id"], r["frame_spec"]): r for r in frames.to_pylist() if r.get("path") and not r.get("error")}


def render(item: dict, caption: dict, *, seed: int, frames_by_key: dict | None = None, **_opts) -> list[Rendered]:
    text = caption.get("text") or ""
    user = f"Caption:\n{text}\n\nRate this caption against the video frames. " \
           'Output only JSON: {"score": 1-5, "explanation": "..."}'
    fr = (frames_by_key or {}).get((item["video_id"], caption.get("frame_spec")))
    r = Rendered(task=item["task"], step="score", system=SYSTEM, user=user, json_schema=SCORE_SCHEMA, max_tokens=256,
                 fields={"caption": text})
    if fr is None:
        r.parse = {"missing": f"no frames for video {item['video_id']!r} with spec {caption.get('frame_spec')!r}"}
    else:
        r.frames_path, r.images_digest = fr["path"], fr["frames_key"]
    return [r]
