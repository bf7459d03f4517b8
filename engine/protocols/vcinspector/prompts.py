"""VC-Inspector prompts, rendered from prompt packs (capeval.engine.packs): a multimodal judge sees video frames and a
caption and scores the caption 1-5 with an explanation.

Params (sweep `protocols[].params`, CLI `--mode/--prompts/--param`):
* `mode` = "strict" (default): capeval's pack, JSON {"score", "explanation"} under a schema, temperature 0; the
  caption fenced as data (engine/replies/fences.py);
  "official": the official inference prompt (pack id judge/score; `prompts` = the VC-Inspector pack, or
  $CAPEVAL_PACKS/vcinspector.toml): one user message, the frames as images BEFORE the text (backends put images
  first), the text starting with one "<image>" mark per frame, no system message, no JSON grammar, no sampling
  parameters (the checkpoint's generation config), max_tokens 1024; the answer is a first line with the integer
  score, then the explanation (parsing.py).
* `judge_frames`: the frame spec of the frames the judge sees. Official default `linspace:32` (the official code
  takes 32 frames at np.linspace(0, N-1, 32)); strict default: the captioner's own frame spec. Frames come from the
  FRAMES table passed as `frames=` (looked up by video and that spec); a caption without them gives a MISSING row.
"""

from __future__ import annotations

import json

from capeval.engine.replies.fences import fence
from capeval.engine.packs import PromptPack, resolve_pack
from capeval.engine.protocols.base import Rendered

OFFICIAL_FRAMES = "linspace:32"
IMAGE_TAG = "<image>"
SCORE_SCHEMA = json.dumps({
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "explanation": {"type": "string",
                                                                                            "maxLength": 400}},
    "required": ["score", "explanation"],
})


def pack_for(mode: str = "strict", prompts=None) -> PromptPack:
    return resolve_pack("vcinspector", prompts, mode=mode, official_name="vcinspector")


#: strict mode's system message (capeval's pack), for callers that build requests by hand
SYSTEM = pack_for().prompt("judge/score_json").role_system


def frames_index(frames) -> dict[tuple[str, str], dict]:
    if frames is None:
        return {}
    return {(r["video_id"], r["frame_spec"]): r for r in frames.to_pylist() if r.get("path") and not r.get("error")}


def _n_frames(fr: dict | None, spec: str) -> int:
    if fr is not None and fr.get("timestamps") is not None:
        return len(fr["timestamps"])
    try:
        return int(spec.split(":", 1)[1].split(",")[0])
    except (IndexError, ValueError):
        return 32


def render(item: dict, caption: dict, *, seed: int, pack: PromptPack, mode: str = "strict",
           frames_by_key: dict | None = None, judge_frames: str | None = None, **_opts) -> list[Rendered]:
    text = caption.get("text") or ""
    spec = judge_frames or (OFFICIAL_FRAMES if mode == "official" else caption.get("frame_spec"))
    fr = (frames_by_key or {}).get((item["video_id"], spec))
    if mode == "official":
        system, user = pack.render("judge/score", image_tags=IMAGE_TAG * _n_frames(fr, spec), caption=text)
        r = Rendered(task=item["task"], step="score", system=system, user=user, max_tokens=1024, temperature=None,
                     send_seed=False, fields={"caption": text}, parse={"mode": "official"})
    else:
        # The caption is the captioner's text and may hold instructions or a ready-made verdict: fenced as data.
        system, user = pack.render("judge/score_json", caption=fence("caption", text))
        r = Rendered(task=item["task"], step="score", system=system, user=user, json_schema=SCORE_SCHEMA,
                     max_tokens=256, fields={"caption": text})
    if fr is None:
        r.parse = {**r.parse, "missing": f"no frames for video {item['video_id']!r} with spec {spec!r}"}
    else:
        r.frames_path, r.images_digest = fr["path"], fr["frames_key"]
    return [r]
