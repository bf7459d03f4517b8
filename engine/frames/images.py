"""Still images as media: JPEG, PNG, WebP and BMP decode with Pillow as ONE frame, whatever the frame spec asks,
so an image item is captioned as an image (a one-frame array flagged `media_type == "image"`), never as a one-frame
video repeated N times. Animated GIFs are left to PyAV (they are videos)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capeval.engine.frames.results import CorruptVideoError, EmptyVideoError, FramesResult, VideoNotFoundError
from capeval.engine.frames.sampling import FrameSpec
from capeval.engine.frames.sizes import Size, output_size, size_text

#: still-image suffixes decoded with Pillow as one frame (animated GIFs go through PyAV as videos)
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp"})


def is_image_path(path: str | Path) -> bool:
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def media_type_of(path: str | Path) -> str:
    """"image" for still-image files, else "video" (what a dataset row's media_type defaults to)."""
    return "image" if is_image_path(path) else "video"


def _pillow_version() -> str:
    import PIL

    return PIL.__version__


def decode_image(path: str | Path, spec: FrameSpec, size: Size = None) -> FramesResult:
    """A still image as ONE frame (whatever the spec asks): uint8 (1, H, W, 3), timestamps [0.0]."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    if not path.exists() or path.is_dir():
        raise VideoNotFoundError(path, "no such file" if not path.exists() else "is a directory, not an image")
    if path.stat().st_size == 0:
        raise EmptyVideoError(path, "file has zero bytes")
    try:
        with Image.open(path) as im:
            from PIL import ImageOps

            im = ImageOps.exif_transpose(im)  # phones store rotation in EXIF, as videos do in metadata
            w, h = im.size
            ow, oh = output_size(size, w, h)
            rgb = im.convert("RGB")
            if (ow, oh) != (w, h):
                rgb = rgb.resize((ow, oh), Image.Resampling.BICUBIC)
            frame = np.asarray(rgb, dtype=np.uint8)[None]
    except UnidentifiedImageError as exc:
        raise CorruptVideoError(path, f"not a readable image: {exc}") from exc
    except OSError as exc:  # truncated or damaged image data
        raise CorruptVideoError(path, f"damaged image: {exc}") from exc
    return FramesResult(frames=np.ascontiguousarray(frame), timestamps=np.zeros(1), targets=np.zeros(1),
                        frame_spec=str(spec), duration=0.0, frames_decoded=1, seeks=0,
                        info={"size": size_text((frame.shape[2], frame.shape[1])), "media_type": "image",
                              "decoder": "pillow", "decoder_version": f"Pillow {_pillow_version()}"},
                        media_type="image")
