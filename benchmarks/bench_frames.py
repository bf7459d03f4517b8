"""`capeval bench frames [--json] [--quick]`: frame cache bytes and JPEG cost per frame on natural-like video.

    capeval bench frames [--json] [--quick]     (or: python -m capeval.benchmarks.bench_frames)

The demo's synthetic videos (flat shapes on a flat background) compress ~10x better than camera footage, so the
disk projection in docs/frames.md is measured here on `make_textured_video`: a 1/f ("pink") noise field, the
power spectrum natural images have, panned across the frame, plus sensor noise (sigma 2), encoded as H.264 at
CRF 20. For each decode size (capeval.engine.frames.sizes) it decodes `uniform:N` from a 1080p clip, encodes the frames
as the cache does (Pillow JPEG at capeval.engine.frames.shards.JPEG_QUALITY) and reports bytes per frame, the share of
raw 1080p RGB bytes, and encode / decode milliseconds per frame (best of 3, one thread).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from capeval.benchmarks.targets import FRAMES, as_json, targets_table, verdicts
from capeval.engine.frames.sampling import FrameSpec

RAW_1080P = 1920 * 1080 * 3


def pink_field(width: int, height: int, seed: int = 0) -> np.ndarray:
    """float32 (H, W, 3) in 0..255 with a 1/f amplitude spectrum (what natural images have), per channel
    correlated like real colour (a shared luminance field plus weaker chroma fields)."""
    rng = np.random.default_rng(seed)
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    amp = 1.0 / np.maximum(np.hypot(fx, fy), 1.0 / max(width, height))
    amp[0, 0] = 0.0

    def field() -> np.ndarray:
        phase = rng.uniform(0, 2 * np.pi, amp.shape)
        f = np.fft.irfft2(amp * np.exp(1j * phase), s=(height, width)).astype(np.float32)
        return (f - f.mean()) / (f.std() + 1e-9)

    luma = field()
    out = np.stack([luma + 0.35 * field() for _ in range(3)], axis=-1)
    return np.clip(128 + 48 * out, 0, 255)


def make_textured_video(path: str | Path, *, size: tuple[int, int] = (1920, 1080), seconds: float = 2.0,
                        fps: int = 24, seed: int = 0, crf: int = 20) -> Path:
    """An H.264 MP4 that compresses like camera footage: a 1/f field panned 3 px per frame plus sensor noise."""
    path = Path(path)
    width, height = size
    n = int(round(seconds * fps))
    pan = 3
    base = pink_field(width + pan * n + 8, height, seed)
    rng = np.random.default_rng(seed + 1)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"crf": str(crf), "preset": "ultrafast"}
        for i in range(n):
            img = base[:, i * pan:i * pan + width] + rng.normal(0, 2.0, (height, width, 3)).astype(np.float32)
            frame = av.VideoFrame.from_ndarray(np.clip(img, 0, 255).astype(np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def _best_ms(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def measure(clip: Path, size, frames: int = 16, quality: int | None = None) -> dict:
    from capeval.engine.frames.decode import decode_frames
    from capeval.engine.frames.shards import JPEG_QUALITY, decode_jpegs, encode_jpegs
    from capeval.engine.frames.sizes import size_text

    quality = JPEG_QUALITY if quality is None else quality
    result = decode_frames(clip, FrameSpec.parse(f"uniform:{frames}"), size, threads=1)
    blobs = encode_jpegs(result.frames, quality)
    per_frame = sum(map(len, blobs)) / len(blobs)
    t, h, w, _ = result.frames.shape
    return {"size": size_text(size), "width": int(w), "height": int(h), "quality": quality,
            "bytes_per_frame": int(per_frame), "share_of_raw_1080p": round(per_frame / RAW_1080P, 4),
            "share_of_raw_at_size": round(per_frame / (w * h * 3), 4),
            "encode_ms_per_frame": round(_best_ms(lambda: encode_jpegs(result.frames, quality)) / t, 2),
            "decode_ms_per_frame": round(_best_ms(lambda: decode_jpegs(blobs)) / t, 2)}


def run(quick: bool = False) -> dict:
    from capeval.engine.frames.sizes import DEFAULT_SIZE

    with tempfile.TemporaryDirectory() as tmp:
        clip = make_textured_video(Path(tmp) / "textured_1080p.mp4", seconds=1.0 if quick else 2.0)
        sizes = [DEFAULT_SIZE] if quick else [DEFAULT_SIZE, "px602112", "px786432", "min384", "min448", None]
        rows = [measure(clip, s, frames=8 if quick else 16) for s in sizes]
        if not quick:
            rows += [measure(clip, DEFAULT_SIZE, frames=16, quality=q) for q in (80, 95)]
    return {"content": "textured (1/f field, panned, sensor noise), H.264 CRF 20, 1920x1080", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="capeval bench frames", description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    out = run(args.quick)
    found = verdicts(FRAMES, out)
    out["targets"] = as_json(found)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(out["content"])
        for r in out["rows"]:
            print(f"  {r['size']:>9} {r['width']}x{r['height']} q{r['quality']}: {r['bytes_per_frame'] / 1024:7.1f} KiB"
                  f"/frame ({100 * r['share_of_raw_1080p']:.2f}% of raw 1080p), enc {r['encode_ms_per_frame']} ms,"
                  f" dec {r['decode_ms_per_frame']} ms")
        print(targets_table(found, quick=args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
