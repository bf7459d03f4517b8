"""A local captioner that needs no GPU, no network and no model: it describes frames from pixel statistics.

This is a PLUMBING CHECK, not a captioning model. It finds the background (the most common colour), segments the
remaining pixels into coloured blobs, names each blob's colour and rough shape (from how much of its bounding box
it fills) and tracks each blob's centroid from the first to the last frame to say which way it moves. It is
deterministic and takes milliseconds per video on one core, so the demo and the tests can run the whole pipeline
(decode -> caption -> judge -> metrics) on a laptop; on videos of flat coloured shapes on a plain background (what
engine/datasets/synthetic_videos.py draws) its captions are even mostly right, which gives the judges something real to do.

The prompt only changes verbosity: prompts that ask for something short ("brief", "concise", "one sentence",
"short") get colours and counts only; every other prompt gets shapes, positions and motion as well. With `context`
(segmental mode) the caption says it continues the previous segments.

Questions (a construction pipeline's question step: a request with `question`,
capeval.adapters.base.CaptionRequest) are answered from the same description (`answer_question`): a multiple-choice question gets the letter of the option its caption supports, an
open one the part of the caption about the quoted subject. With `answers=FILE` (JSONL lines {"task", "item_id",
"sub_index" (optional), "text"}) it answers from that script instead, so tests know every answer in advance; a
question the script lacks fails, naming it.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from capeval.adapters.base import CaptionRequest, CaptionResponse
from capeval.engine.params import Param

#: Named colours (RGB); a blob gets the nearest name. Covers what the synthetic videos draw.
PALETTE: dict[str, tuple[int, int, int]] = {
    "black": (15, 15, 15),
    "white": (245, 245, 245),
    "gray": (128, 128, 128),
    "red": (220, 30, 30),
    "green": (30, 180, 60),
    "blue": (40, 70, 220),
    "yellow": (240, 220, 40),
    "orange": (250, 140, 20),
    "purple": (150, 50, 200),
    "cyan": (30, 210, 220),
    "magenta": (220, 40, 200),
    "brown": (130, 80, 30),
    "pink": (250, 160, 190),
    "navy": (20, 30, 80),
    "beige": (230, 215, 180),
    "dark green": (20, 70, 40),
}
_NAMES = list(PALETTE)
_RGB = np.array([PALETTE[n] for n in _NAMES], dtype=np.float32)
_BRIEF_WORDS = ("brief", "concise", "one sentence", "short", "succinct")
_NUMBER_WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


@dataclass(frozen=True)
class Blob:
    color: str
    shape: str
    x: float  # centroid, as a fraction of the width
    y: float
    area: float  # fraction of the frame


def _nearest_color(rgb: np.ndarray) -> np.ndarray:
    """Index into the palette of each RGB row (N, 3)."""
    d = ((rgb[:, None, :].astype(np.float32) - _RGB[None, :, :]) ** 2).sum(-1)
    return d.argmin(1)


def _shape_of(mask: np.ndarray) -> str:
    """Rough shape from how much of its bounding box a blob fills: square ~1.0, circle ~0.785, triangle ~0.5."""
    ys, xs = np.nonzero(mask)
    h, w = ys.max() - ys.min() + 1, xs.max() - xs.min() + 1
    fill = mask.sum() / float(h * w)
    if fill > 0.9:
        return "square" if 0.75 < h / w < 1.33 else "rectangle"
    if fill > 0.65:
        return "circle"
    return "triangle"


def find_blobs(frame: np.ndarray, min_area: float = 0.002) -> list[Blob]:
    """Coloured blobs of one uint8 (H, W, 3) frame, largest first; the most common colour is the background."""
    from scipy import ndimage

    h, w, _ = frame.shape
    labels = _nearest_color(frame.reshape(-1, 3)).reshape(h, w)
    counts = np.bincount(labels.ravel(), minlength=len(_NAMES))
    background = int(counts.argmax())
    blobs = []
    for ci in np.nonzero(counts)[0]:
        if ci == background:
            continue
        comp, n = ndimage.label(labels == ci)
        if n == 0:
            continue
        sizes = ndimage.sum_labels(np.ones_like(comp), comp, index=np.arange(1, n + 1))
        for li, size in enumerate(sizes, start=1):
            if size / (h * w) < min_area:
                continue
            mask = comp == li
            ys, xs = np.nonzero(mask)
            blobs.append(Blob(_NAMES[ci], _shape_of(mask), xs.mean() / w, ys.mean() / h, size / (h * w)))
    blobs.sort(key=lambda b: (-b.area, b.color))
    return blobs


def background_color(frame: np.ndarray) -> str:
    labels = _nearest_color(frame.reshape(-1, 3))
    return _NAMES[int(np.bincount(labels, minlength=len(_NAMES)).argmax())]


def _direction(dx: float, dy: float, still: float = 0.04) -> str:
    if max(abs(dx), abs(dy)) < still:
        return "stays still"
    if abs(dx) >= abs(dy):
        return "moves right" if dx > 0 else "moves left"
    return "moves down" if dy > 0 else "moves up"


def _position(b: Blob) -> str:
    horiz = "left" if b.x < 0.4 else "right" if b.x > 0.6 else "center"
    vert = "top" if b.y < 0.4 else "bottom" if b.y > 0.6 else "middle"
    return "center" if (horiz, vert) == ("center", "middle") else f"{vert} {horiz}".replace("middle ", "")


def _number(n: int) -> str:
    return _NUMBER_WORDS[n] if n < len(_NUMBER_WORDS) else str(n)


def describe(frames: np.ndarray, prompt: str = "", context: str | None = None) -> str:
    """The caption of uint8 (T, H, W, 3) frames; see the module docstring for what it can and cannot say."""
    if frames.ndim != 4 or frames.shape[0] == 0 or frames.shape[-1] != 3:
        raise ValueError(f"expected uint8 frames of shape (T, H, W, 3), got {frames.shape}")
    first, last = find_blobs(frames[0]), find_blobs(frames[-1])
    bg = background_color(frames[0])
    brief = any(word in prompt.lower() for word in _BRIEF_WORDS)
    lead = "Continuing from the previous segment, " if context else ""
    if not first:
        return f"{lead}a plain {bg} background with no visible objects over {frames.shape[0]} frames."
    colors = sorted({b.color for b in first})
    n = len(first)
    head = f"{lead}the video shows {_number(n)} object{'s' if n != 1 else ''} on a {bg} background"
    if brief:
        return f"{head[0].upper()}{head[1:]}: {', '.join(colors)}."
    parts = []
    # Match each first-frame blob to the nearest same-colour blob in the last frame to estimate its motion.
    unused = list(last)
    for b in first:
        same = [c for c in unused if c.color == b.color]
        if same and frames.shape[0] > 1:
            m = min(same, key=lambda c: (c.x - b.x) ** 2 + (c.y - b.y) ** 2)
            unused.remove(m)
            motion = _direction(m.x - b.x, m.y - b.y)
        else:
            motion = "stays still" if frames.shape[0] > 1 else "is visible"
        parts.append(f"a {b.color} {b.shape} in the {_position(b)} that {motion}")
    body = "; ".join(parts)
    return f"{head[0].upper()}{head[1:]} across {frames.shape[0]} sampled frames: {body}."


_YES = ("yes",)


def answer_question(frames: np.ndarray, question: Mapping[str, str]) -> str:
    """A plumbing answer from the caption of `frames`: for a choice question, "A" (yes) when the quoted subject of
    the question is in the caption and "B" otherwise for yes/no options, else the first option the caption names
    (a count: the number of caption parts naming the subject); for an open question, the caption parts naming the
    subject, or the whole caption."""
    caption = describe(frames)
    low = caption.lower()
    quoted = re.findall(r'"([^"]+)"', question.get("question", ""))
    subject = quoted[0].lower() if quoted else ""
    parts = [p for p in re.split(r"[;:]", caption) if subject and subject in p.lower()]
    if question.get("kind") != "choice":
        return "; ".join(p.strip() for p in parts) or caption
    options = [str(o) for o in json.loads(question.get("options") or "[]")]
    letters = "ABCDEFGH"[:len(options)]
    if options and options[0].lower() in _YES:
        return letters[0] if subject and subject in low else letters[1]
    count = str(len(parts))
    for letter, option in zip(letters, options):
        if option == count or re.search(rf"\b{re.escape(option.lower())}\b", low):
            return letter
    return letters[0] if letters else ""


def _read_answers(path: str | Path) -> dict[tuple, str]:
    out: dict[tuple, str] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str) or "item_id" not in rec:
            raise ValueError(f"{path}:{n}: expected {{\"task\", \"item_id\", \"sub_index\"?, \"text\"}}")
        sub = rec.get("sub_index")
        out[(str(rec.get("task") or ""), str(rec["item_id"]), "" if sub is None else str(int(sub)))] = rec["text"]
    return out


class LocalCaptioner:
    """Pixel-statistics captioner (plumbing check; no model). Same API as the model-backed captioners."""

    revision = "pixelstats-1"
    params = (Param("name", (str,), "local", "captioner name recorded in captions"),
              Param("latency_s", (float,), 0.0, "seconds each caption takes on top of the pixel statistics", low=0),
              Param("max_in_flight", (int,), 8, "captions one caption actor works on at once", low=1),
              Param("answers", (str, type(None)), None, "a JSONL script of answers to questions"))

    def __init__(self, name: str = "local", latency_s: float = 0.0, max_in_flight: int = 8,
                 answers: str | None = None, **_: object):
        """latency_s: seconds each caption takes on top of the pixel statistics (a stand-in for a model's generation
        time, for benchmarks and tests of stage overlap). max_in_flight: captions one caption actor works on at
        once (capeval.adapters.base.StreamingCaptioner; the latency waits overlap, the pixel statistics share the GIL).
        answers: a JSONL script of answers to questions (see the module docstring)."""
        self.name = name
        self.latency_s = float(latency_s)
        self.max_in_flight = max(1, int(max_in_flight))
        self.answers = _read_answers(answers) if answers else None

    def _answer(self, r: CaptionRequest) -> str:
        q = r.question or {}
        if self.answers is None:
            return answer_question(np.asarray(r.frames), q)
        for key in ((q.get("task", ""), q.get("item_id", ""), q.get("sub_index", "")),
                    ("", q.get("item_id", ""), q.get("sub_index", "")), (q.get("task", ""), q.get("item_id", ""), "")):
            if key in self.answers:
                return self.answers[key]
        raise KeyError(f"no scripted answer for task {q.get('task')!r} item {q.get('item_id')!r} "
                       f"sub_index {q.get('sub_index') or None}")

    def _describe(self, r: CaptionRequest, t0: float) -> CaptionResponse:
        try:
            text = (self._answer(r) if getattr(r, "question", None) is not None
                    else describe(np.asarray(r.frames), r.prompt, r.context))
        except Exception as exc:  # per-request failure, never the batch
            return CaptionResponse(r.key, None, error=f"{type(exc).__name__}: {exc}")
        return CaptionResponse(r.key, text, prompt_tokens=len(r.prompt.split()) + len((r.context or "").split()),
                               n_tokens=len(text.split()), latency_s=time.perf_counter() - t0)

    def caption(self, requests: Sequence[CaptionRequest]) -> list[CaptionResponse]:
        out = []
        for r in requests:
            t0 = time.perf_counter()
            if self.latency_s > 0:
                time.sleep(self.latency_s)
            out.append(self._describe(r, t0))
        return out

    async def acaption(self, request: CaptionRequest) -> CaptionResponse:
        """One caption without holding the caller's event loop: the latency is awaited, the statistics run in a
        thread."""
        import asyncio

        t0 = time.perf_counter()
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        return await asyncio.to_thread(self._describe, request, t0)

    def close(self) -> None:
        pass
