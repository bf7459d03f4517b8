"""Sparse frame decoding with PyAV: decode only what the sampled timestamps need.

For each target time (sorted), find the keyframe at or before it. Seek there only when that keyframe lies
beyond what has already been decoded (a later GOP); otherwise keep decoding forward. Only the frames kept
are converted (`to_ndarray(width, height, format="rgb24")`, i.e. resized inside swscale), so the cost is close
to the lower bound "decode each needed keyframe..target run once". Output: uint8 RGB (T, H, W, 3) and the pts
(seconds) of the frames actually returned.

Threads. `threads="auto"` with targets in several GOPs splits the sorted targets at seek points into ranges of whole
keyframe..target runs, one per core, each decoded by its own container and a single-threaded decoder. Codec frame
threads suit decoding every frame, not short runs: each seek flushes their pipeline and the frames they decoded past
the target are thrown away (on the bench clip that wasted ~35% CPU against ~4% when decoding everything). The ranges
return exactly what one decoder going through all targets returns: a range starts with the seek that decoder would
make (checked afterwards; otherwise, or on any error, one decoder decodes everything again). With one range, or a
number of threads given, one decoder with that many codec threads does it all.

H.264/HEVC only: while decoding forward towards a target, packets displayed well before it (more than a few
frame intervals) are sent with `skip_frame="NONREF"`, so frames no other frame references (non-reference
B-frames) are never decoded; packets that can be the target go back to "DEFAULT". Reference frames decode
exactly as before, so the frames returned are bit-identical to decoding everything. Not for VP9/AV1: their
hidden/alt-ref frames make "non-reference" a per-decoder notion we have not proven safe.

Images (JPEG, PNG, WebP, BMP) are one frame, read with Pillow: every spec returns that frame once, flagged
`media_type == "image"`, never a one-frame video repeated N times.

Bad inputs raise a `VideoDecodeError` subclass whose message names the file and what is wrong; batch callers
(capeval.engine.frames.cache) turn it into an error row and go on.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from capeval.engine.frames.images import decode_image, is_image_path
from capeval.engine.frames.results import (CorruptVideoError, EmptyVideoError, FramesResult, NoVideoStreamError,  # noqa: F401
                                   TruncatedVideoError, VideoDecodeError, VideoNotFoundError)  # re-exported here too
from capeval.engine.frames.sampling import FrameSpec, FrameSpecError, KeyframeSnap
from capeval.engine.frames.sizes import Size, output_size, size_text  # noqa: F401 - re-exported (older imports)

#: what decodes videos, for the frames-seen ledger (capeval.engine.frames.ledger): a decoder update can move a frame
DECODER = "pyav"


def decoder_version() -> str:
    """PyAV's version and the FFmpeg decoding libraries it runs on, e.g. "av 14.2.0, libavcodec 61.19.100"."""
    libs = getattr(av, "library_versions", {}) or {}
    parts = [f"av {av.__version__}"] + [f"{name} {'.'.join(str(x) for x in libs[name])}"
                                        for name in ("libavcodec", "libavformat", "libswscale") if name in libs]
    return ", ".join(parts)


def _open(path: Path):
    if not path.exists():
        raise VideoNotFoundError(path, "no such file")
    if path.is_dir():
        raise VideoNotFoundError(path, "is a directory, not a video file")
    if path.stat().st_size == 0:
        raise EmptyVideoError(path, "file has zero bytes")
    try:
        container = av.open(str(path), metadata_errors="ignore")
    except av.error.FFmpegError as exc:
        raise CorruptVideoError(path, f"cannot open container: {exc}") from exc
    if not container.streams.video:
        kinds = ", ".join(s.type for s in container.streams) or "none"
        container.close()
        raise NoVideoStreamError(path, f"no video stream (streams: {kinds})")
    return container


def _configure(stream, threads: int | str) -> None:
    # Frame+slice threading helps large frames; a worker pool may pin threads=1 to scale by processes instead.
    if threads == "auto":
        stream.thread_type = "AUTO"
    else:
        stream.codec_context.thread_count = int(threads)
        stream.thread_type = "AUTO" if int(threads) > 1 else "SLICE"


class KeyframeIndex:
    """Keyframe display times (s): a sorted array (from a demux scan) or FFmpeg's own index (binary search in C,
    so an hour-long MP4 with 90k samples costs nothing to open). An FFmpeg index is only valid while its
    container is open: use it inside decode_frames, never after."""

    def __init__(self, *, times: np.ndarray | None = None, index=None, time_base: float = 0.0):
        self.times, self.index, self.tb = times, index, time_base
        # MP4 index timestamps are decode times; with B-frames a keyframe's display time is later by the
        # (constant, for common encoders) reorder delay. Measuring from the first entry removes that delay,
        # so a seek lands on the keyframe itself and not on the one before it.
        self.first = index[0].timestamp if index is not None and len(index) else 0

    def _search(self, t: float, backward: bool) -> float | None:
        if self.times is not None:
            if backward:
                k = np.searchsorted(self.times, t + 1e-9, side="right") - 1
                return float(self.times[k]) if k >= 0 else None
            k = np.searchsorted(self.times, t - 1e-9, side="left")
            return float(self.times[k]) if k < len(self.times) else None
        ts = self.first + int(math.floor(t / self.tb + 1e-6)) if backward else self.first + int(math.ceil(t / self.tb - 1e-6))
        pos = self.index.search_timestamp(ts, backward=backward)
        return None if pos < 0 else (self.index[pos].timestamp - self.first) * self.tb

    def before(self, t: float) -> float | None:
        """Time of the last keyframe at or before t."""
        return self._search(t, True)

    def after(self, t: float) -> float | None:
        """Time of the first keyframe at or after t."""
        return self._search(t, False)


def _probe(path: Path, stream, container) -> tuple[KeyframeIndex, float, bool]:
    """(keyframe index, duration in s, scanned) from the container index, or from a demux-only scan."""
    tb = stream.time_base
    start = stream.start_time or 0
    index = stream.index_entries
    declared = None
    if stream.duration:
        declared = float(stream.duration * tb)
    elif container.duration:
        declared = container.duration / av.time_base - max(0.0, float(start * tb))
    if stream.frames > 0 and len(index) >= stream.frames:  # a full sample table (MP4/MOV)
        # MP4 index timestamps are decode times; with B-frames a keyframe's display time is later by the
        # (constant, for common encoders) reorder delay. Measuring from the first entry removes that delay,
        # so a seek lands on the keyframe itself and not on the one before it.
        return KeyframeIndex(index=index, time_base=float(tb)), declared or stream.frames / float(stream.guessed_rate or 25), False
    # No complete index (Matroska/WebM cues are partial or deferred, raw/TS streams have none): read the
    # packets without decoding them (I/O only) to find keyframes and where the data actually ends.
    keys, end, count = [], None, 0
    try:
        for packet in container.demux(stream):
            ts = packet.pts if packet.pts is not None else packet.dts
            if ts is None:
                continue
            count += 1
            t = float((ts - start) * tb)
            if packet.is_keyframe:
                keys.append(t)
            t_end = t + float((packet.duration or 0) * tb)
            end = t_end if end is None else max(end, t_end)
    except av.error.FFmpegError as exc:
        raise CorruptVideoError(path, f"demuxing failed after {count} packets: {exc}") from exc
    if count == 0 or end is None:
        raise CorruptVideoError(path, "the video stream has no readable packets")
    if declared and end < 0.9 * declared - 0.1:
        raise TruncatedVideoError(path, f"container declares {declared:.2f} s but the data ends at {end:.2f} s")
    return KeyframeIndex(times=np.array(sorted(keys))), (declared if declared and declared <= end + 0.5 else end), True


def decode_frames(
    path: str | Path,
    spec: FrameSpec,
    size: Size = None,
    *,
    threads: int | str = "auto",
    interpolation: str | None = None,
    skip_nonref: bool = True,
) -> FramesResult:
    """Decode the frames `spec` asks for from the video at `path`, resized to `size`; see the module doc.
    `threads`: "auto" (GOP ranges decoded in parallel, one per core, or codec threads for one range) or the number
    of codec threads of one decoder. `skip_nonref=False` decodes every frame between a keyframe and its target
    (same output, slower)."""
    path = Path(path)
    if is_image_path(path):
        return decode_image(path, spec, size)
    container = _open(path)
    try:
        stream = container.streams.video[0]
        _configure(stream, threads)
        keys, duration, scanned = _probe(path, stream, container)
        if scanned:  # the scan consumed the packets; reopening is cheaper and safer than seeking back
            container.close()
            container = _open(path)
            stream = container.streams.video[0]
            _configure(stream, threads)
        try:
            rate = float(stream.guessed_rate or stream.average_rate or 0) or None
            targets = spec.timestamps(duration, rate)
            if isinstance(spec, KeyframeSnap):
                near = [k for t in targets for k in (keys.before(t), keys.after(t)) if k is not None]
                targets = spec.snap(targets, np.unique(np.array(near, np.float64)), duration)
        except FrameSpecError as exc:
            raise CorruptVideoError(path, f"no usable duration: {exc}") from exc
        return _decode_targets(path, container, stream, spec, targets, keys, duration, size, interpolation,
                               skip_nonref, threads)
    except av.error.FFmpegError as exc:  # seek/convert failures not caught closer to their cause
        raise CorruptVideoError(path, f"decoding failed: {exc}") from exc
    finally:
        container.close()


class _Keeper:
    """The output rows (RGB at the asked size, rotated) and their times, set up from the first frame kept; ranges
    decoded in parallel each write their own rows."""

    def __init__(self, n: int, order: np.ndarray, size: Size, interpolation: str | None):
        self.n, self.order, self.size, self.interpolation = n, order, size, interpolation
        self.out = self.times = None
        self.rotation = 0
        self.kw: dict = {}
        self._lock = threading.Lock()

    def setup(self, frame) -> None:
        with self._lock:
            if self.out is not None:
                return
            self.rotation = int(frame.rotation or 0)
            turned = self.rotation % 180 != 0
            dw, dh = (frame.height, frame.width) if turned else (frame.width, frame.height)
            ow, oh = output_size(self.size, dw, dh)
            cw, ch = (oh, ow) if turned else (ow, oh)
            # one swscale thread: parallelism comes from decoding (GOP ranges, one video per worker); the pixels
            # are the same with any number (swscale threads split output lines)
            kw = {"width": cw, "height": ch, "format": "rgb24", "threads": 1}
            if self.interpolation:
                kw["interpolation"] = self.interpolation
            self.kw = kw
            self.times = np.empty(self.n, np.float64)
            self.out = np.empty((self.n, oh, ow, 3), np.uint8)


class _Converter:
    """Converts each kept frame of one decoder at once (colour conversion and resize in one swscale call), so
    decoder buffers are released. One swscale context for all of them: `frame.to_ndarray(**kw)` makes one per
    frame."""

    def __init__(self, keeper: _Keeper):
        self.keeper = keeper
        self.reformatter = VideoReformatter()
        self._last = (None, None)  # (frame, converted array): several targets may share one frame

    def keep(self, j: int, time: float, frame) -> None:
        keeper = self.keeper
        if keeper.out is None:
            keeper.setup(frame)
        if self._last[0] is not frame:
            img = self.reformatter.reformat(frame, **keeper.kw).to_ndarray()
            if keeper.rotation % 360:
                img = np.rot90(img, k=(keeper.rotation // 90) % 4)
            self._last = (frame, img)
        keeper.out[keeper.order[j]] = self._last[1]
        keeper.times[keeper.order[j]] = time


#: decoders whose NONREF skipping is proven to leave every reference frame (and so every output) unchanged
SKIP_NONREF_CODECS = frozenset({"h264", "hevc"})
#: packets displayed more than this many frame intervals before the target may skip non-reference frames;
#: > the 2-interval end-of-stream tolerance, so the frame used at a truncated end is never a skipped one
SKIP_MARGIN_FRAMES = 4


class _NonRefSkipper:
    """Sets the decoder's skip_frame per packet: NONREF for packets displayed before `until` (seconds), DEFAULT
    for the rest. The setting is read when a packet is submitted (frame threads copy it), so it is exact per
    packet."""

    def __init__(self, stream, rate: float | None, enabled: bool = True):
        self.ctx = stream.codec_context
        self.tb, self.start = float(stream.time_base), stream.start_time or 0
        self.enabled = bool(enabled and rate and self.ctx.name in SKIP_NONREF_CODECS)
        self.margin = SKIP_MARGIN_FRAMES / rate if rate else 0.0
        self.until = -math.inf
        self.state = "DEFAULT"

    def aim(self, target: float, tol: float) -> None:
        """Frames displayed before target - tol cannot be returned for it (nor for any later target)."""
        self.until = target - tol - self.margin

    def packet(self, packet) -> None:
        if not self.enabled:
            return
        ts = packet.pts
        want = "NONREF" if ts is not None and (ts - self.start) * self.tb < self.until else "DEFAULT"
        if want != self.state:
            self.ctx.skip_frame = want
            self.state = want


#: a GOP range decoded in parallel holds at least this many seeks: fewer do not pay for a container and a thread
MIN_SEEKS_PER_RANGE = 2
#: at most this many ranges (threads, open containers) per video
MAX_RANGES = 8


class _NotAsOneDecoder(Exception):
    """A range cannot show that it returns what one decoder going through all targets would: decode as one."""


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _ranges(sorted_t: np.ndarray, keys: KeyframeIndex, tol: float, workers: int) -> list[tuple[int, int]]:
    """[lo, hi) index ranges of the sorted targets, split where one decoder would seek (the next target's keyframe
    lies more than a frame past the frame returned for the previous target), balanced by the frames each range
    decodes (keyframe -> last target, estimated from the times)."""
    n = len(sorted_t)
    if workers < 2 or n < 2:
        return [(0, n)]
    key_of = [keys.before(float(t)) for t in sorted_t]
    key_of = [0.0 if k is None else k for k in key_of]
    starts = [0] + [i for i in range(1, n) if key_of[i] > sorted_t[i - 1] + 2 * tol + 1e-6]
    workers = min(workers, len(starts) // MIN_SEEKS_PER_RANGE, MAX_RANGES)
    if workers < 2:
        return [(0, n)]
    ends = starts[1:] + [n]
    cost = np.cumsum([sorted_t[e - 1] - key_of[s] + 2 * tol for s, e in zip(starts, ends)])  # one frame at least
    cuts, total = [0], cost[-1]
    for w in range(1, workers):
        g = int(np.searchsorted(cost, total * w / workers))
        if g + 1 < len(starts) and starts[g + 1] > cuts[-1]:
            cuts.append(starts[g + 1])
    return [(lo, hi) for lo, hi in zip(cuts, cuts[1:] + [n])]


def _decode_targets(path, container, stream, spec, targets, keys, duration, size, interpolation,
                    skip_nonref: bool = True, threads: int | str = "auto") -> FramesResult:
    rate = float(stream.guessed_rate or stream.average_rate or 0) or None
    tol = 0.5 / rate if rate else 0.0  # pick the frame nearest the target in a constant-rate video
    order = np.argsort(targets, kind="stable")
    sorted_t = targets[order]
    keeper = _Keeper(len(targets), order, size, interpolation)
    ranges = _ranges(sorted_t, keys, tol, _usable_cores()) if threads == "auto" else [(0, len(sorted_t))]
    done = None
    if len(ranges) > 1:
        try:
            done = _decode_ranges(path, sorted_t, ranges, keys, duration, tol, keeper, skip_nonref)
        except Exception:  # noqa: BLE001 - any doubt (an error, a range not starting at a seek): one decoder decides
            keeper = _Keeper(len(targets), order, size, interpolation)
    if done is None:  # `stream` is still as decode_frames configured it: the ranges used containers of their own
        done = [_decode_range(path, container, stream, sorted_t, 0, len(sorted_t), keys, duration, tol,
                              _Converter(keeper), skip_nonref)]
    return FramesResult(
        frames=keeper.out, timestamps=keeper.times, targets=np.asarray(targets, np.float64), frame_spec=str(spec),
        duration=float(duration), frames_decoded=sum(r[0] for r in done), seeks=sum(r[1] for r in done),
        rotation=keeper.rotation,
        info={"size": size_text((keeper.out.shape[2], keeper.out.shape[1])), "rate": rate, "decoder": DECODER,
              "decoder_version": decoder_version()},
    )


def _decode_ranges(path, sorted_t, ranges, keys, duration, tol, keeper, skip_nonref) -> list[tuple[int, int, float]]:
    """Decode each range with its own container and a one-thread decoder, in parallel; _NotAsOneDecoder when a
    range's first target would not have begun with a seek in one decoder going through them all."""

    def one(lo: int, hi: int) -> tuple[int, int, float]:
        own = _open(path)
        try:
            stream = own.streams.video[0]
            _configure(stream, 1)
            return _decode_range(path, own, stream, sorted_t, lo, hi, keys, duration, tol, _Converter(keeper),
                                 skip_nonref)
        finally:
            own.close()

    with ThreadPoolExecutor(len(ranges), thread_name_prefix="capeval-decode") as pool:
        futures = [pool.submit(one, lo, hi) for lo, hi in ranges]
    done = [f.result() for f in futures]  # re-raises a range's error
    for (lo, _), (_, _, before) in zip(ranges[1:], done):
        t = float(sorted_t[lo])
        key_t = keys.before(t)
        key_t = 0.0 if key_t is None else key_t
        if not (key_t > before + 1e-6 and t - tol > before):  # one decoder would have gone on without seeking
            raise _NotAsOneDecoder(f"target {t} s follows the frame at {before} s")
    return done


def _decode_range(path, container, stream, sorted_t, lo, hi, keys, duration, tol, converter: _Converter,
                  skip_nonref: bool) -> tuple[int, int, float]:
    """Decode the sorted targets [lo, hi) into the converter's rows: (frames decoded, seeks, time of the last frame
    decoded). A range other than the whole list raises _NotAsOneDecoder where what one decoder does depends on
    the frames before it (a frame without a timestamp, the stream ending)."""
    tb = float(stream.time_base)
    start = stream.start_time or 0
    rate = float(stream.guessed_rate or stream.average_rate or 0) or None
    whole = lo == 0 and hi == len(sorted_t)
    skipper = _NonRefSkipper(stream, rate, skip_nonref)
    decoded = seeks = 0
    last_time = -math.inf
    last_frame = None
    packets = None
    i = lo
    try:
        while i < hi:
            t = sorted_t[i]
            key_t = keys.before(t)
            key_t = 0.0 if key_t is None else key_t
            if packets is None or key_t > last_time + 1e-6:
                # The keyframe before t lies beyond what we decoded: jump there (skip whole GOPs).
                if packets is not None:
                    packets.close()
                container.seek(int(round(key_t / tb)) + start, stream=stream, backward=True)
                seeks += 1
                packets = _frames(path, container, stream, skipper)
            skipper.aim(t, tol)
            got = False
            for frame in packets:
                decoded += 1
                if frame.pts is None and not whole:
                    raise _NotAsOneDecoder("a frame without a timestamp is timed from the frame before it")
                ft = (frame.pts - start) * tb if frame.pts is not None else last_time + (1 / rate if rate else 0)
                last_time, last_frame = float(ft), frame
                if last_time >= t - tol:
                    got = True
                    break
            if not got:  # the stream ended before t: the last frame serves targets within two frame steps
                if not whole:
                    raise _NotAsOneDecoder("the stream ended inside a range")
                step = 1 / rate if rate else 0.1
                for j in range(i, len(sorted_t)):
                    if last_frame is None or sorted_t[j] - last_time > 2 * step + 1e-6:
                        where = "no frames decoded" if last_frame is None else f"stream ends at {last_time:.2f} s"
                        raise TruncatedVideoError(
                            path, f"{where}; frame at {sorted_t[j]:.2f} s (of {duration:.2f} s) unavailable, "
                            f"got {j} of {len(sorted_t)} frames")
                    converter.keep(j, last_time, last_frame)
                break
            converter.keep(i, last_time, last_frame)
            i += 1
            while i < hi and sorted_t[i] - tol <= last_time:  # more targets than frames
                converter.keep(i, last_time, last_frame)
                i += 1
    finally:
        if packets is not None:
            packets.close()
    return decoded, seeks, last_time


def _frames(path, container, stream, skipper: _NonRefSkipper | None = None):
    """Decoded frames from the current position; a packet the decoder rejects is a per-video error."""
    tb = stream.time_base
    try:
        for packet in container.demux(stream):
            if skipper is not None:
                skipper.packet(packet)
            try:
                yield from packet.decode()
            except av.error.InvalidDataError as exc:
                at = f"{float(packet.pts * tb):.2f} s" if packet.pts is not None else "unknown time"
                raise CorruptVideoError(path, f"corrupt packet at {at}: {exc}") from exc
    except av.error.FFmpegError as exc:
        raise CorruptVideoError(path, f"demuxing failed: {exc}") from exc


def probe_duration(path: str | Path) -> float:
    """Duration in seconds, by the same rules the decoder uses (index, container, or a demux scan)."""
    container = _open(Path(path))
    try:
        return _probe(Path(path), container.streams.video[0], container)[1]
    finally:
        container.close()


__all__ = [
    "CorruptVideoError", "EmptyVideoError", "FramesResult", "NoVideoStreamError", "TruncatedVideoError",
    "VideoDecodeError", "VideoNotFoundError", "decode_frames", "output_size", "probe_duration", "size_text",
]
