"""Images are one frame (Pillow), whatever the spec; `linspace:K` takes np.linspace(0, N-1, K) frame indices."""

from __future__ import annotations

import av
import numpy as np
import pytest
from PIL import Image

from capeval.engine.datasets.synthetic_videos import make_video
from capeval.engine.frames.cache import decode_frames_cached, frames_row
from capeval.engine.frames.decode import CorruptVideoError, EmptyVideoError, decode_frames
from capeval.engine.frames.images import media_type_of
from capeval.engine.frames.sampling import FrameSpec, FrameSpecError, Linspace


def _picture(w=64, h=48) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([xx * 4 % 256, yy * 5 % 256, (xx + yy) % 256], -1).astype(np.uint8)


@pytest.mark.parametrize("suffix, lossless", [(".png", True), (".webp", True), (".jpg", False), (".JPEG", False)])
@pytest.mark.parametrize("spec", ["uniform:8", "fps:2,max=16", "linspace:32", "segments:length=5,per=3"])
def test_image_is_one_frame_for_every_spec(tmp_path, suffix, lossless, spec):
    pix = _picture()
    path = tmp_path / f"pic{suffix}"
    kw = {"lossless": True} if suffix == ".webp" else {}
    Image.fromarray(pix).save(path, **kw)
    r = decode_frames(path, FrameSpec.parse(spec))
    assert r.media_type == "image" and r.frames.shape == (1, 48, 64, 3)
    assert r.timestamps.tolist() == [0.0] and r.frame_spec == str(FrameSpec.parse(spec))
    if lossless:
        assert np.array_equal(r.frames[0], pix)
    else:  # JPEG: close to the source, not equal
        assert np.abs(r.frames[0].astype(int) - pix).mean() < 12
    assert media_type_of(path) == "image"


def test_image_resize_cache_and_frames_row(tmp_path):
    path = tmp_path / "big.png"
    Image.fromarray(_picture(200, 100)).save(path)
    r = decode_frames(path, FrameSpec.parse("uniform:4"), size=100)
    assert r.frames.shape == (1, 50, 100, 3)
    first = decode_frames_cached(path, FrameSpec.parse("uniform:4"), 100, tmp_path / "cache")
    again = decode_frames_cached(path, FrameSpec.parse("uniform:4"), 100, tmp_path / "cache")
    assert not first.cache_hit and again.cache_hit and again.media_type == "image"
    assert np.array_equal(first.frames, again.frames)
    row = frames_row(path, "big", FrameSpec.parse("uniform:4"), 100, tmp_path / "cache")
    assert row["error"] is None and row["media_type"] == "image" and row["timestamps"] == [0.0]


def test_bad_images_are_decode_errors(tmp_path):
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    with pytest.raises(EmptyVideoError):
        decode_frames(empty, FrameSpec.parse("uniform:2"))
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"not an image at all" * 10)
    with pytest.raises(CorruptVideoError, match="junk.png"):
        decode_frames(junk, FrameSpec.parse("uniform:2"))
    good = tmp_path / "cut.jpg"
    Image.fromarray(_picture(256, 256)).save(good)
    cut = tmp_path / "cut2.jpg"
    cut.write_bytes(good.read_bytes()[:200])
    with pytest.raises(CorruptVideoError):
        decode_frames(cut, FrameSpec.parse("uniform:2"))
    row = frames_row(junk, "junk", FrameSpec.parse("uniform:2"), None, tmp_path / "cache")
    assert row["error"] and "junk.png" in row["error"]


def test_linspace_spec_parsing():
    assert str(FrameSpec.parse("linspace:32")) == "linspace:32"
    assert str(FrameSpec.parse("linspace:8,snap=key")) == "linspace:8,snap=key"
    assert Linspace(5).indices(11).tolist() == [0, 2, 5, 7, 10]
    assert Linspace(4).indices(10).tolist() == np.linspace(0, 9, 4, dtype=int).tolist()
    for bad in ("linspace:0", "linspace:2.5", "linspace:", "linspace:3,4"):
        with pytest.raises(FrameSpecError):
            FrameSpec.parse(bad)


def test_linspace_decodes_official_indices_with_endpoints(tmp_path):
    path = tmp_path / "v.mp4"
    make_video(path, codec="libx264", seconds=3.0, fps=10, size=(64, 48), seed=3)
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        ref = [f.to_ndarray(format="rgb24") for f in c.decode(s)]
    r = decode_frames(path, FrameSpec.parse("linspace:7"))
    want = np.linspace(0, len(ref) - 1, 7, dtype=int)
    assert r.frames.shape[0] == 7
    assert np.allclose(r.timestamps, want / 10.0)
    for got, idx in zip(r.frames, want):
        assert np.array_equal(got, ref[idx])
    # uniform takes segment centres instead: neither the first nor the last frame
    u = decode_frames(path, FrameSpec.parse("uniform:7"))
    assert u.timestamps[0] > 0 and u.timestamps[-1] < (len(ref) - 1) / 10.0
