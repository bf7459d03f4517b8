"""H.264 videos with hard cuts at known frames (PyAV), for scene detection and LVCap construction tests.

Each shot is a flat background colour with a white square sliding across it: the slide is motion inside a shot
(small frame-to-frame change), the colour switch between shots is a hard cut (large change), at frame
sum(frames of the shots before) exactly, i.e. at that frame count / fps seconds."""

from __future__ import annotations

from pathlib import Path

COLOURS = {"red": (220, 30, 30), "green": (30, 180, 60), "blue": (40, 70, 220), "yellow": (240, 220, 40),
           "purple": (150, 50, 200), "gray": (128, 128, 128), "light gray": (158, 158, 158)}


def make_cut_video(path: Path, shots: list[tuple[str, int]], *, fps: int = 24, size=(160, 120)) -> list[float]:
    """Write the video; `shots` = [(colour name, frames)]. Returns the cut times in seconds."""
    import av
    import numpy as np

    w, h = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"g": str(2 * fps)}
        for colour, n in shots:
            for i in range(n):
                img = np.empty((h, w, 3), np.uint8)
                img[:] = COLOURS[colour]
                x = 8 + (3 * i) % (w - 40)
                img[h // 3: h // 3 + 24, x: x + 24] = 245
                for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    cuts, at = [], 0
    for _, n in shots[:-1]:
        at += n
        cuts.append(at / fps)
    return cuts
