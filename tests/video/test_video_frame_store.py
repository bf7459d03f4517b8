"""Frames that fit on disk: decode sizes per captioner family, JPEG shards (bytes, file count, kill -9, eviction).

Real videos (PyAV), real Ray decode tasks, real processes killed with SIGKILL; the cache folder is measured on disk.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from _sweeps import write_sweep

from capeval.engine.frames import cache as frame_cache
from capeval.engine.frames import shards
from capeval.engine.frames.cache import frames_row, load_encoded_frames, load_frames
from capeval.engine.frames.sampling import FrameSpec
from capeval.engine.frames.sizes import DEFAULT_SIZE, SizeError, frame_size_for, output_size, parse_size, size_text
from capeval.engine.stages.decode import decode_stream

ROOT = Path(__file__).resolve().parents[2]


def _files(d: Path) -> list[Path]:
    return [p for p in d.rglob("*") if p.is_file()]


def _bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in _files(d))


@pytest.fixture(scope="module")
def textured_1080p(tmp_path_factory) -> Path:
    """2 s of 1080p H.264 that compresses like camera footage (1/f texture, panning, sensor noise)."""
    from capeval.benchmarks.bench_frames import make_textured_video

    return make_textured_video(tmp_path_factory.mktemp("hd") / "textured_1080p.mp4", seconds=2.0, fps=12)


def test_1080p_uniform32_frame_cache_is_under_5_percent_of_raw(ray_local, textured_1080p, tmp_path):
    """The Done-when bullet: the decode stage (Ray tasks, the sweep's default size) at uniform:32 on a 1080p video
    leaves frame-cache bytes <= 5% of 32 x 1920 x 1080 x 3 (before: native .npy, 100%)."""
    cache = tmp_path / "frames"
    rows = [r for batch in decode_stream([("hd", str(textured_1080p))], ["uniform:32"], cache_dir=str(cache))
            for r in batch]
    assert rows[0]["failure"] is None, rows[0]
    assert (rows[0]["width"], rows[0]["height"]) == (768, 432)  # DEFAULT_SIZE: longer side 768
    raw = 32 * 1920 * 1080 * 3
    used = _bytes(cache)
    assert used <= 0.05 * raw, f"frame cache holds {used} bytes = {used / raw:.2%} of raw 1080p"
    frames = load_frames(rows[0])
    assert frames.shape == (32, 432, 768, 3) and frames.dtype == np.uint8


def test_frame_cache_file_count_grows_far_slower_than_videos(ray_local, tmp_path):
    """100 videos through the decode stage leave at most 100 / 20 + 8 files in the frame cache (before: 2 per
    video and spec)."""
    from capeval.engine.datasets.synthetic_videos import make_video

    videos = []
    for i in range(100):
        path = tmp_path / "v" / f"v{i:03d}.mp4"
        path.parent.mkdir(exist_ok=True)
        make_video(path, codec="h264", seconds=0.5, fps=8, size=(48, 32), seed=500 + i)
        videos.append((f"v{i:03d}", str(path)))
    cache = tmp_path / "frames"
    rows = [r for batch in decode_stream(videos, ["uniform:2"], cache_dir=str(cache)) for r in batch]
    assert len(rows) == 100 and all(r["failure"] is None for r in rows)
    files = _files(cache)
    assert len(files) <= 100 // 20 + 8, sorted(p.name for p in files)
    assert len({r["frames_key"] for r in rows}) == 100
    for r in rows[::17]:
        assert load_frames(r).shape == (2, 32, 48, 3)


def test_encoded_frames_are_the_stored_bytes_not_reencoded(test_videos, frame_cache_dir, monkeypatch):
    row = frames_row(test_videos["h264"]["path"], "v", FrameSpec.parse("uniform:4"), 96, frame_cache_dir)
    calls = []
    monkeypatch.setattr(shards, "encode_jpegs", lambda *a, **k: calls.append(a) or ())  # must not be needed
    blobs = load_encoded_frames(row)
    assert len(blobs) == 4 and all(b[:2] == b"\xff\xd8" and b[-2:] == b"\xff\xd9" for b in blobs)
    data = b"".join(p.read_bytes() for p in (frame_cache_dir / "shards").glob("*.jpgs"))
    assert b"".join(blobs) in data  # the bytes on disk, handed out as they are
    assert np.array_equal(load_frames(row), shards.decode_jpegs(blobs))
    assert not calls
    from capeval.engine.judging.requests import load_jpegs

    assert load_jpegs(row["path"]) == blobs  # the judge's frames too


def test_evicted_entry_is_decoded_again_not_an_error(test_videos, frame_cache_dir):
    row = frames_row(test_videos["h264_long"]["path"], "v", FrameSpec.parse("uniform:5"), 64, frame_cache_dir)
    before = load_frames(row)
    assert shards.evict(frame_cache_dir, 0)  # everything goes (another process's eviction, mid-sweep)
    assert not _files(frame_cache_dir / "shards")
    decodes = frame_cache.DECODES["count"]
    again = load_frames(row)
    assert frame_cache.DECODES["count"] == decodes + 1
    assert np.array_equal(again, before)  # same decode, same JPEG encoder: the same pixels
    assert load_encoded_frames(row) is not None and frame_cache.DECODES["count"] == decodes + 1  # stored again


def test_damaged_entry_is_decoded_again(test_videos, frame_cache_dir):
    row = frames_row(test_videos["h264"]["path"], "v", FrameSpec.parse("uniform:3"), 64, frame_cache_dir)
    before = load_frames(row)
    (data,) = (frame_cache_dir / "shards").glob("*.jpgs")
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # a flipped byte: the CRC no longer matches
    data.write_bytes(bytes(raw))
    shards.index_for(frame_cache_dir).entries.clear()
    shards.index_for(frame_cache_dir).read_to.clear()
    assert np.array_equal(load_frames(row), before)


@pytest.mark.parametrize("damage", [{"lens": [1 << 50]}, {"lens": [-(1 << 20), 1 << 21]}, {"off": 1 << 40},
                                    {"lens": "x"}, {"meta": {"shape": [9]}}])
def test_a_damaged_index_line_reads_as_missing_and_is_decoded_again(test_videos, frame_cache_dir, damage):
    """An .idx line whose lengths or offset point outside its shard (a huge length made a reader allocate it:
    MemoryError, a caption failure on every rerun), or whose fields are not an entry's, is a missing entry: the
    frames are decoded again and stored anew, and the same key then reads from the new entry."""
    import json

    row = frames_row(test_videos["h264"]["path"], "v", FrameSpec.parse("uniform:3"), 64, frame_cache_dir)
    before = load_frames(row)
    (idx,) = (frame_cache_dir / "shards").glob("*.idx")
    rec = json.loads(idx.read_bytes())
    idx.write_text(json.dumps({**rec, **damage}) + "\n")
    shards.index_for(frame_cache_dir).entries.clear()  # this process's index reads afresh, as a new run's would
    shards.index_for(frame_cache_dir).read_to.clear()
    decodes = frame_cache.DECODES["count"]
    assert frames_row(test_videos["h264"]["path"], "v", FrameSpec.parse("uniform:3"), 64, frame_cache_dir)["error"] is None
    assert np.array_equal(load_frames(row), before)
    assert frame_cache.DECODES["count"] == decodes + 1  # decoded once again, then read from the new entry
    assert rec["key"] in shards.entries(frame_cache_dir)


def test_cap_evicts_least_recently_used_shards(tmp_path):
    """Noise entries of ~94 KB under a 400 KB cap: shards roll at 64 KiB, the cache stays under the cap,
    the writer's own shard stays, and a shard read recently outlives older unread ones."""
    cache = tmp_path / "frames"
    writer = shards.ShardWriter(cache, 400_000)
    rng = np.random.default_rng(0)
    keys = []
    for i in range(3):
        blobs = shards.encode_jpegs(rng.integers(0, 256, (4, 160, 160, 3), dtype=np.uint8))
        writer.put(f"k{i}", blobs, {"i": i})
        keys.append(f"k{i}")
        time.sleep(0.02)
    index = shards.ShardIndex(cache)
    first = index.get("k0")
    os.utime(first.shard, (time.time() + 5, time.time() + 5))  # k0 was just used: newest
    for i in range(3, 8):
        writer.put(f"k{i}", shards.encode_jpegs(rng.integers(0, 256, (4, 160, 160, 3), dtype=np.uint8)), {"i": i})
        assert shards.cache_bytes(cache) <= 400_000
    left = set(shards.entries(cache))
    assert "k7" in left and "k0" in left and "k1" not in left, left


KILLED_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from capeval.engine.frames import shards
    w = shards.ShardWriter(sys.argv[1], 1 << 40)
    rng = np.random.default_rng(0)
    blobs = shards.encode_jpegs(rng.integers(0, 256, (8, 256, 256, 3), dtype=np.uint8))
    i = 0
    while True:
        w.put(f"k{i}", blobs, {"i": i})
        i += 1
        if i == 3:
            print("ready", flush=True)
""")


def test_kill9_mid_append_leaves_whole_entries_or_nothing(tmp_path):
    cache = tmp_path / "frames"
    for attempt in range(3):  # three kills at arbitrary points of the append loop
        proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(cache)], cwd=ROOT, stdout=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.05 * (attempt + 1))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # A torn index line (a kill inside the line's write) counts as nothing.
    idx = sorted((cache / "shards").glob("*.idx"))[0]
    with open(idx, "ab") as f:
        f.write(b'{"key":"torn","off":0,"lens":[5')
    found = shards.entries(cache)
    assert len(found) >= 3 and "torn" not in found
    for entry in found.values():
        blobs = shards.read_entry(entry)
        assert blobs is not None and len(blobs) == 8  # every indexed entry is whole and CRC-clean
        assert shards.decode_jpegs(blobs).shape == (8, 256, 256, 3)
    w = shards.ShardWriter(cache, 1 << 40)  # a new writer goes on beside the killed ones' shards
    w.put("after", shards.encode_jpegs(np.zeros((1, 8, 8, 3), np.uint8)), {})
    assert shards.read_entry(shards.entries(cache)["after"]) is not None


def test_sizes_family_table_and_parsing():
    assert frame_size_for({"model": "Qwen/Qwen2.5-VL-7B-Instruct"}) == "px602112"
    assert frame_size_for({"model": "Qwen/Qwen2-VL-2B-Instruct"}) == "px602112"
    assert frame_size_for({"model": "/tmp/tiny/qwen2_5_vl-random"}) == "px602112"  # local checkpoint dirs
    assert frame_size_for({"model": "Qwen/Qwen3-VL-8B-Instruct"}) == "px786432"
    assert frame_size_for({"model": "llava-hf/llava-onevision-qwen2-7b-ov-hf"}) == "min384"
    assert frame_size_for({"model": "lmms-lab/LLaVA-Video-7B-Qwen2"}) == "min384"
    assert frame_size_for({"model": "OpenGVLab/InternVL3-8B"}) == "min448"
    assert frame_size_for({"model": "gpt-4o"}) == parse_size(DEFAULT_SIZE) == 768
    assert frame_size_for({}) == 768

    class Spec:
        params = {"model": "Qwen/Qwen2.5-VL-7B-Instruct"}
        frame_size = "native"

    assert frame_size_for(Spec()) is None  # the sweep's own frame_size wins, "native" included
    assert [size_text(s) for s in (None, 448, (448, 336), "px602112", "MIN384", "max768")] == [
        "native", "max448", "448x336", "px602112", "min384", "max768"]
    for bad in ("big", "px3", 1, True, "0x5"):
        with pytest.raises(SizeError):
            parse_size(bad)
    w, h = output_size("px602112", 1920, 1080)
    assert w * h <= 602112 and w % 2 == h % 2 == 0 and abs(w / h - 16 / 9) < 0.01
    assert output_size("min384", 1920, 1080) == (682, 384)
    assert output_size("min384", 320, 240) == (320, 240)  # never upscales
    assert output_size(768, 1080, 1920) == (432, 768)


def test_sweep_file_frame_size_is_checked_and_enters_the_cell_key(tmp_path):
    from capeval.engine.sweep.config import load_sweep
    from capeval.engine.sweep.grid import expand

    def sweep(**captioner) -> Path:
        return write_sweep(tmp_path / "s.toml", "s", prompts=("brief",), frames=("uniform:2",),
                           dataset={"name": "d", "kind": "synthetic", "n_videos": 1},
                           captioners=[{"name": "local", **captioner}])

    base = load_sweep(sweep())
    sized = load_sweep(sweep(frame_size="px200000"))
    assert sized.captioners[0].frame_size == "px200000" and base.captioners[0].frame_size is None
    args = dict(dataset_digest="d", captioner_revision="r", prompt_text="p", judge_revision="j")
    assert expand(base)[0].key(**args) != expand(sized)[0].key(**args)
    with pytest.raises(Exception) as err:
        load_sweep(sweep(frame_size="huge"))
    assert "captioners[0].frame_size" in str(err.value) and "not a frame size" in str(err.value)


def test_decode_jpegs_gives_pils_rgb_pixels_for_rgb_grey_and_cmyk_jpegs():
    """decode_jpegs (each frame written into its place, converted only when not RGB) gives exactly the pixels of
    PIL's open + convert("RGB") + stack, whatever mode the JPEG was stored in; frames of different sizes fail."""
    import io

    from PIL import Image

    rng = np.random.default_rng(3)

    def jpeg(mode: str, side: int = 24) -> bytes:
        image = Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).convert(mode)
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=shards.JPEG_QUALITY)
        return buf.getvalue()

    blobs = (*shards.encode_jpegs(rng.integers(0, 256, (3, 24, 24, 3), dtype=np.uint8)), jpeg("L"), jpeg("CMYK"))
    reference = np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB"), dtype=np.uint8) for b in blobs])
    got = shards.decode_jpegs(blobs)
    assert got.dtype == np.uint8 and got.shape == (5, 24, 24, 3)
    assert np.array_equal(got, reference)
    assert shards.decode_jpegs(()).shape == (0, 0, 0, 3)
    with pytest.raises(ValueError, match="different sizes"):
        shards.decode_jpegs((blobs[0], jpeg("RGB", side=16)))


def test_parse_locator_parses_once_and_hands_out_a_new_dict_each_call(tmp_path):
    """A locator's fields are parsed once per text (a caption task reads them twice), yet each call returns its own
    dict, so a caller changing one cannot change what the next caller reads; a non-locator still fails, naming it."""
    loc = frame_cache.locator(tmp_path, "k1", "uniform:4", (64, 64), tmp_path / "v.mp4", "d1")
    first = frame_cache.parse_locator(loc)
    assert first == {"cache_dir": str(tmp_path.resolve()), "key": "k1", "spec": "uniform:4", "size": "64x64",
                     "digest": "d1", "src": str((tmp_path / "v.mp4").resolve())}
    first["key"] = "changed"
    assert frame_cache.parse_locator(loc)["key"] == "k1"
    for bad in ("frames.npy", "frames:/x?key=k"):
        with pytest.raises(ValueError, match="locator"):
            frame_cache.parse_locator(bad)
