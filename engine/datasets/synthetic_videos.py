"""Real encoded test videos (PyAV) with known content, plus broken variants, for tests, benchmarks and the demo.

`make_video` draws colored shapes moving over a plain background and encodes them with a real codec; the
ground truth (background color, each shape's kind/color/path, counts) is returned and written next to the
video as `<video>.json`, so a demo can ask real questions ("how many red circles?") with known answers.
`make_broken_videos` writes the bad inputs a decoder meets in the wild: zero bytes, truncated, corrupted
packets, audio only, unknown duration, variable frame rate, rotation metadata and a very large resolution.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

#: Named colors used for shapes and backgrounds (RGB); names are the ground truth a caption can be judged on.
COLORS = {
    "red": (220, 30, 30),
    "green": (30, 180, 60),
    "blue": (40, 70, 220),
    "yellow": (240, 220, 40),
    "purple": (150, 50, 200),
    "orange": (250, 140, 20),
    "white": (245, 245, 245),
    "black": (15, 15, 15),
}
BACKGROUNDS = {"gray": (128, 128, 128), "navy": (20, 30, 80), "beige": (230, 215, 180), "dark green": (20, 70, 40)}
SHAPES = ("circle", "square", "triangle")

#: Logical codec name -> PyAV encoder names to try, in order.
ENCODERS = {"h264": ("libx264",), "vp9": ("libvpx-vp9",), "av1": ("libsvtav1", "libaom-av1", "librav1e")}
_CONTAINER_FOR = {"libx264": "mp4", "libvpx-vp9": "webm", "libsvtav1": "matroska", "libaom-av1": "matroska", "librav1e": "matroska"}


def available_encoders() -> dict[str, str]:
    """{logical codec: PyAV encoder} for the codecs this PyAV build can both encode and decode."""
    found = {}
    for name, encoders in ENCODERS.items():
        for enc in encoders:
            try:
                av.codec.Codec(enc, "w")
                av.codec.Codec({"h264": "h264", "vp9": "vp9", "av1": "av1"}[name], "r")
            except Exception:  # noqa: BLE001 - UnknownCodecError and friends: simply not in this build
                continue
            found[name] = enc
            break
    return found


def _sprite(shape: str, size: int) -> np.ndarray:
    """Boolean mask (size, size) of a shape."""
    yy, xx = np.mgrid[0:size, 0:size] + 0.5
    if shape == "circle":
        r = size / 2
        return (yy - r) ** 2 + (xx - r) ** 2 <= r * r
    if shape == "square":
        return np.ones((size, size), bool)
    if shape == "triangle":  # apex up
        return (yy >= size * 0.05) & (np.abs(xx - size / 2) <= yy / 2)
    raise ValueError(f"unknown shape {shape!r} (choose from {SHAPES})")


def scene_ground_truth(seed: int, size: tuple[int, int], n_shapes: int | None = None) -> dict:
    """The scene drawn for `seed`: background, and shapes with kind, color, start (px) and velocity (px/s)."""
    rng = np.random.default_rng(seed)
    width, height = size
    background = sorted(BACKGROUNDS)[rng.integers(len(BACKGROUNDS))]
    n = int(n_shapes if n_shapes is not None else rng.integers(2, 6))
    shape_colors = [c for c in COLORS if c not in ("white", "black")] if background != "beige" else list(COLORS)
    side = max(8, min(width, height) // 6)
    shapes = []
    for _ in range(n):
        shapes.append(
            {
                "shape": SHAPES[rng.integers(len(SHAPES))],
                "color": shape_colors[rng.integers(len(shape_colors))],
                "size_px": side,
                "start": [float(rng.uniform(0, width - side)), float(rng.uniform(0, height - side))],
                "velocity": [float(rng.uniform(-0.4, 0.4) * width), float(rng.uniform(-0.4, 0.4) * height)],
            }
        )
    counts: dict[str, int] = {}
    for s in shapes:
        key = f"{s['color']} {s['shape']}"
        counts[key] = counts.get(key, 0) + 1
    return {"background": background, "shapes": shapes, "counts": counts, "n_shapes": n, "seed": seed}


def _bounce(p0: float, v: float, t: float, span: float) -> float:
    """Position of a point moving at v inside [0, span], reflecting at the walls."""
    if span <= 0:
        return 0.0
    x = (p0 + v * t) % (2 * span)
    return x if x <= span else 2 * span - x


def render_frame(truth: dict, t: float, size: tuple[int, int]) -> np.ndarray:
    """RGB uint8 (H, W, 3) of the scene at time t."""
    width, height = size
    img = np.empty((height, width, 3), np.uint8)
    img[:] = BACKGROUNDS[truth["background"]]
    for s in truth["shapes"]:
        side = s["size_px"]
        x = int(_bounce(s["start"][0], s["velocity"][0], t, width - side))
        y = int(_bounce(s["start"][1], s["velocity"][1], t, height - side))
        mask = _sprite(s["shape"], side)[: height - y, : width - x]
        img[y : y + mask.shape[0], x : x + mask.shape[1]][mask] = COLORS[s["color"]]
    return img


@contextmanager
def _thread_scheduling_kept():
    """Put back the calling thread's scheduling policy once encoding is done.

    SVT-AV1 (libsvtav1) raises the thread that opens it to SCHED_FIFO priority 99 when it runs as root. Every
    process started from that thread afterwards (Ray's GCS, raylets and workers, servers, subprocesses) inherits
    the real-time policy, and one of them busy for a second starves everything else on a small machine.
    """
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if (os.sched_getscheduler(0), os.sched_getparam(0)) != (policy, param):
            os.sched_setscheduler(0, policy, param)


def make_video(
    path: str | Path,
    *,
    codec: str = "libx264",
    seconds: float = 4.0,
    fps: float = 24,
    size: tuple[int, int] = (160, 120),
    gop_seconds: float = 2.0,
    pattern: str = "moving_shapes",
    seed: int = 0,
    n_shapes: int | None = None,
    container_format: str | None = None,
    rotation: int | None = None,
    frame_times: list[float] | None = None,
    crf: int = 28,
    bframes: int = 0,
    sidecar: bool = True,
) -> dict:
    """Encode a video of moving shapes; return (and write as `<path>.json`) its ground truth.

    `codec` is a PyAV encoder name or a logical name (h264, vp9, av1). `frame_times` (seconds, increasing)
    makes a variable-frame-rate video (millisecond time base); `rotation` writes a display matrix (degrees,
    counter-clockwise, as PyAV's `VideoFrame.rotation` reads it back). `bframes` > 0 (H.264) adds B-frames.
    """
    if pattern != "moving_shapes":
        raise ValueError(f"unknown pattern {pattern!r} (only 'moving_shapes')")
    encoder = available_encoders().get(codec, codec) if codec in ENCODERS else codec
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = container_format or _CONTAINER_FOR.get(encoder, "mp4")
    truth = scene_ground_truth(seed, size, n_shapes)
    if frame_times is None:
        n_frames = max(1, int(round(seconds * fps)))
        frame_times = [i / fps for i in range(n_frames)]
        rate = Fraction(fps).limit_denominator(1001)
        time_base = 1 / rate
    else:
        rate = Fraction(fps).limit_denominator(1001)
        time_base = Fraction(1, 1000)
    width, height = size
    with _thread_scheduling_kept(), av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream(encoder, rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.time_base = time_base
        stream.codec_context.time_base = time_base
        gop = max(1, int(round(gop_seconds * fps)))
        opts = {"g": str(gop), "keyint_min": str(gop)}
        if encoder == "libx264":
            opts.update({"preset": "ultrafast" if not bframes else "veryfast", "crf": str(crf), "sc_threshold": "0"})
            if bframes:  # reordered frames: decode order differs from display order, as in most real H.264
                opts.update({"bframes": str(bframes), "b-pyramid": "normal"})
        elif encoder == "libvpx-vp9":
            opts.update({"deadline": "realtime", "cpu-used": "8", "crf": str(crf + 10), "b": "0"})
        elif encoder == "libsvtav1":
            opts.update({"preset": "12", "crf": str(crf + 10)})
        elif encoder == "libaom-av1":
            opts.update({"cpu-used": "8", "crf": str(crf + 10), "usage": "realtime"})
        stream.options = opts
        if rotation:
            stream.set_display_rotation(rotation)
        for t in frame_times:
            frame = av.VideoFrame.from_ndarray(render_frame(truth, t, size), format="rgb24")
            frame.pts = int(round(t / time_base))
            frame.time_base = time_base
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    truth.update(
        {
            "path": str(path),
            "codec": encoder,
            "container": fmt,
            "width": width,
            "height": height,
            "fps": float(fps),
            "n_frames": len(frame_times),
            "duration_s": float(frame_times[-1] + (1 / fps if len(frame_times) < 2 else frame_times[-1] - frame_times[-2])),
            "gop_seconds": gop_seconds,
            "rotation": rotation or 0,
            "vfr": frame_times is not None and len(set(np.round(np.diff(frame_times), 6))) > 1,
        }
    )
    if sidecar:
        Path(str(path) + ".json").write_text(json.dumps(truth, indent=1))
    return truth


class _NoSeekWriter:
    """A write-only, non-seekable sink: muxers cannot go back to write the duration or an index."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        return self._f.write(data)



def reuse_or_make_video(path: Path, *, seconds: float, fps: float, size: tuple[int, int], seed: int) -> dict:
    """The ground truth of the H.264 video at `path`: the one there when its sidecar says the same seed and length,
    else made now (a changed seed or duration makes the video again, never reuses a stale one)."""
    sidecar = Path(f"{path}.json")
    if path.is_file() and sidecar.is_file():
        truth = json.loads(sidecar.read_text())
        if truth.get("seed") == seed and truth.get("n_frames") == max(1, int(round(seconds * fps))):
            return truth
    return make_video(path, codec="h264", seconds=seconds, fps=fps, size=size, seed=seed)


def _remux_video(src: Path, out) -> None:
    """Copy the video packets of `src` into the open output container `out`, without re-encoding."""
    with av.open(str(src)) as inp:
        ins = inp.streams.video[0]
        outs = out.add_stream_from_template(ins)
        for packet in inp.demux(ins):
            if packet.dts is None:  # the demuxer's final flush packet
                continue
            packet.stream = outs
            out.mux(packet)

def make_unknown_duration_video(path: str | Path, *, seconds: float = 3.0, fps: float = 24, seed: int = 5) -> Path:
    """Matroska written to a non-seekable sink: no Duration element and no Cues (demuxers see unknown duration)."""
    path = Path(path)
    src = path.with_suffix(".src.mkv")
    make_video(src, codec="libx264", seconds=seconds, fps=fps, seed=seed, container_format="matroska", sidecar=False)
    with open(path, "wb") as raw, av.open(_NoSeekWriter(raw), "w", format="matroska") as out:
        _remux_video(src, out)
    src.unlink()
    return path


def make_audio_only(path: str | Path, seconds: float = 2.0) -> Path:
    """An .m4a with one AAC stream and no video stream."""
    path = Path(path)
    rate = 44100
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("aac", rate=rate)
        t = np.arange(int(seconds * rate)) / rate
        samples = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
        for start in range(0, len(samples), 1024):
            chunk = samples[start : start + 1024][None, :]
            frame = av.AudioFrame.from_ndarray(chunk, format="flt", layout="mono")
            frame.sample_rate = rate
            frame.pts = start
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def make_broken_videos(directory: str | Path, *, size: tuple[int, int] = (160, 120), large: bool = True) -> dict[str, Path]:
    """Write each bad-input variant into `directory`; returns {variant: path}.

    Variants: zero_bytes, not_a_video (text bytes), truncated (first 45% of a Matroska file), corrupt_packets (mid-file packet bytes
    overwritten with noise, container structure intact), audio_only, unknown_duration, vfr, rotated (90°),
    large (4096x2160, 1 s) and missing (a path that does not exist).
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    out["missing"] = d / "missing.mp4"
    (d / "zero_bytes.mp4").write_bytes(b"")
    out["zero_bytes"] = d / "zero_bytes.mp4"
    (d / "not_a_video.mp4").write_text("this is a text file with a video extension\n" * 50)
    out["not_a_video"] = d / "not_a_video.mp4"

    whole = d / "whole.mkv"
    make_video(whole, codec="libx264", seconds=6, fps=24, size=size, seed=11, container_format="matroska")
    data = whole.read_bytes()
    (d / "truncated.mkv").write_bytes(data[: int(len(data) * 0.45)])
    out["truncated"] = d / "truncated.mkv"

    fast = d / "fast.mp4"  # moov first, so the damage hits packet payloads only
    make_video(fast, codec="libx264", seconds=6, fps=24, size=size, seed=12, sidecar=False)
    _faststart_copy = d / "corrupt_packets.mp4"
    with av.open(str(_faststart_copy), "w", options={"movflags": "faststart"}) as dst:
        _remux_video(fast, dst)
    fast.unlink()
    buf = bytearray(_faststart_copy.read_bytes())
    rng = np.random.default_rng(7)
    mdat = buf.find(b"mdat")
    start = mdat + (len(buf) - mdat) // 3
    stop = mdat + 2 * (len(buf) - mdat) // 3
    noise = rng.integers(0, 256, stop - start, dtype=np.uint8).tobytes()
    buf[start:stop] = noise
    _faststart_copy.write_bytes(bytes(buf))
    out["corrupt_packets"] = _faststart_copy

    out["audio_only"] = make_audio_only(d / "audio_only.m4a")
    out["unknown_duration"] = make_unknown_duration_video(d / "unknown_duration.mkv")
    # Frame intervals alternate 20 ms and 80 ms, then a 0.5 s freeze: timestamps must come from pts.
    times, t = [], 0.0
    for i in range(60):
        times.append(round(t, 3))
        t += 0.5 if i == 40 else (0.02 if i % 2 else 0.08)
    make_video(d / "vfr.mkv", codec="libx264", frame_times=times, fps=20, size=size, seed=13, container_format="matroska")
    out["vfr"] = d / "vfr.mkv"
    make_video(d / "rotated.mp4", codec="libx264", seconds=2, fps=24, size=size, seed=14, rotation=90)
    out["rotated"] = d / "rotated.mp4"
    if large:
        make_video(d / "large.mp4", codec="libx264", seconds=1, fps=8, size=(4096, 2160), seed=15, gop_seconds=1)
        out["large"] = d / "large.mp4"
    return out
