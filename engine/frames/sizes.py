"""Frame sizes: what a frame is resized to when decoded, and which size a captioner (or judge) consumes.

A size is one of (canonical text in brackets, it enters the frames key):
  None            native resolution                                   [native]
  int N / "maxN"  longer side at most N, aspect kept                  [maxN]
  "pxN"           at most N pixels (W*H), aspect kept                  [pxN]    Qwen-VL's `max_pixels`
  "minN"          shorter side at most N, aspect kept                  [minN]   square-input encoders
  (W, H) / "WxH"  exactly W x H                                        [WxH]
No size ever upscales (except an exact WxH); sizes are rounded to even pixels (4:2:0 chroma).

Which size a captioner gets (`frame_size_for`): its own `frame_size` when the sweep sets one, else the size its
model family's video processor resizes to (FAMILY_SIZES, matched on the `model` parameter), else DEFAULT_SIZE.
Decoding at that size instead of natively is what keeps the frame cache small; the model sees the same pixels
(its processor would make them from the native frame anyway, with its own resampling).
"""

from __future__ import annotations

import math
import re

Size = int | tuple[int, int] | str | None

#: Default for captioners of unknown family (API models, the local captioner): longer side 768. It is the
#: short-side target of the large API models' high-detail image path (OpenAI scales to 768 px short side, Gemini
#: tiles at 768), keeps small text legible, and is 16% of a 1080p frame's pixels (~1% of its raw bytes as JPEG).
DEFAULT_SIZE = "max768"

#: (pattern on the model name, size) of the video processors people use, first match wins. Values are the
#: families' published video processor defaults (transformers' *VideoProcessor `size`, which vLLM uses):
#:   Qwen2-VL / Qwen2.5-VL  size.longest_edge = 28*28*768 = 602,112 pixels per frame (qwen-vl-utils VIDEO_MAX_PIXELS)
#:   Qwen3-VL               32*32*768 = 786,432 pixels per frame at most
#:   LLaVA-OneVision / LLaVA-Video / LLaVA-NeXT-Video  SigLIP 384 x 384 (frames squashed to the square)
#:   InternVL (2.5, 3, 3.5) 448 x 448 tiles, one tile per video frame (the checkpoints' image_size)
#: For square inputs the frame is kept with its shorter side at the square's side ("minN"), so the processor's own
#: squash sees at least its input resolution on both axes and the stored frame keeps its aspect for other uses.
FAMILY_SIZES: tuple[tuple[str, str], ...] = (
    (r"qwen3[-_.]?vl", "px786432"),
    (r"qwen2([-_.]?5)?[-_.]?vl", "px602112"),
    (r"llava[-_.]?(onevision|video|next[-_.]?video)|llava[-_.]?ov", "min384"),
    (r"internvl", "min448"),
)

_TEXT = re.compile(r"^(?:(native)|max(\d+)|px(\d+)|min(\d+)|(\d+)x(\d+))$")


class SizeError(ValueError):
    """A frame size that cannot be used; the message says what is accepted."""


def parse_size(value: Size) -> Size:
    """The canonical form of `value` (None, int, "pxN", "minN" or (W, H)); SizeError when it is not a size."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SizeError(f"not a frame size: {value!r}")
    if isinstance(value, int):
        if value < 2:
            raise SizeError(f"frame size must be >= 2 pixels, got {value}")
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        if min(value) < 1:
            raise SizeError(f"frame size must be positive, got {tuple(value)}")
        return int(value[0]), int(value[1])
    m = _TEXT.match(str(value).strip().lower()) if isinstance(value, str) else None
    if not m:
        raise SizeError(f"not a frame size: {value!r} (use 'native', 768 or 'max768' (longer side), "
                        f"'px602112' (max pixels), 'min384' (shorter side) or '448x448')")
    native, mx, px, mn, w, h = m.groups()
    if native:
        return None
    if mx:
        return parse_size(int(mx))
    if w:
        return parse_size((int(w), int(h)))
    n = int(px or mn)
    if n < (16 if px else 2):
        raise SizeError(f"frame size {value!r} is too small")
    return f"px{n}" if px else f"min{n}"


def size_text(size: Size) -> str:
    """Canonical text of a size: native | max448 | px602112 | min384 | 448x336 (enters the frames key)."""
    size = parse_size(size)
    if size is None:
        return "native"
    if isinstance(size, int):
        return f"max{size}"
    if isinstance(size, str):
        return size
    return f"{size[0]}x{size[1]}"


def _even(x: float) -> int:
    return max(2, int(round(x / 2)) * 2)


def output_size(size: Size, width: int, height: int) -> tuple[int, int]:
    """(W, H) of the returned frames for a displayed picture of width x height; even sizes for chroma."""
    try:
        size = parse_size(size)
    except SizeError as exc:
        raise ValueError(str(exc)) from None
    if size is None:
        return width, height
    if isinstance(size, tuple):
        return size
    if isinstance(size, int):
        scale = size / max(width, height)
    elif size.startswith("px"):
        scale = math.sqrt(int(size[2:]) / (width * height))
    else:
        scale = int(size[3:]) / min(width, height)
    if scale >= 1.0:
        return width, height
    w, h = _even(width * scale), _even(height * scale)
    if isinstance(size, str) and size.startswith("px"):
        while w * h > int(size[2:]) and min(w, h) > 2:  # rounding up must not pass the pixel budget
            w, h = (w - 2, h) if w >= h else (w, h - 2)
    return w, h


def family_size(model: str | None) -> str | None:
    """The size the model family's video processor uses (FAMILY_SIZES), or None for an unknown family."""
    name = (model or "").lower()
    for pattern, size in FAMILY_SIZES:
        if re.search(pattern, name):
            return size
    return None


def frame_size_for(component) -> Size:
    """The decode size of a captioner or judge (capeval.engine.sweep.config.ComponentSpec or a dict of params): its
    `frame_size`, else its model family's size, else DEFAULT_SIZE."""
    explicit = getattr(component, "frame_size", None)
    if explicit is not None:
        return parse_size(explicit)
    params = getattr(component, "params", component) or {}
    model = params.get("model") or params.get("model_path") or params.get("served_model_name")
    return parse_size(family_size(str(model)) if model else None) or parse_size(DEFAULT_SIZE)
