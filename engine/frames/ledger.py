"""The frames-seen ledger: what a caption's model was given, recorded on its caption row (`frames_seen`, JSON text).

Every caption made by the caption stage records, beside its text (engine/stages/caption_worker.py):

    decoder, decoder_version   what decoded the video ("pyav", "av 14.2.0, libavcodec 61.19.100, ...") or image
    rate                       the video's frame rate as the decoder read it (null for images and older caches)
    frame_spec                 the spec the frames were chosen by
    indices                    frame numbers of the frames given: round(timestamp × rate) (exact in a constant-rate
                               video; an estimate in a variable-rate one); null without a rate
    timestamps                 seconds from the video start of the frames given (what the decoder returned)
    n_frames, frame_size       how many frames and their size ("WxH") after capeval's decode-time resize
    digest, frame_digests      SHA-256 of the pixels given (all frames; and per frame, first 16 hex digits)
    processor                  what the backend reports it handed its processor, when it reports it
                               (capeval.adapters.base.CaptionResponse.processor_inputs): the metadata and kwargs
                               passed (fps, frame indices, do_sample_frames), the frame size after the processor's
                               resize, the number of visual tokens the processor produced
    frames_sent                positions (in the frames above) of the frames actually sent, when a backend cap
                               sent fewer; the other fields then describe the frames sent

Two captions saw identical frames exactly when their digests are equal; `compare_ledgers` says where two differ.
The ledger is additive data: it enters no key, and a caption row without one (made before the ledger existed, or
read from a file) reads as null.
"""

from __future__ import annotations

import hashlib
import json
from typing import Mapping, Sequence

import numpy as np

LEDGER_VERSION = 1
FRAME_DIGEST_HEX = 16  # per-frame digest length shown and compared: 64 bits, enough to tell frames apart


def frame_digests(frames: np.ndarray) -> list[str]:
    """The SHA-256 (hex) of each frame's pixels. The caption stage takes them while the request is at the backend,
    so hashing does not wait behind the answer (`frames_seen(..., digests=)`)."""
    return [hashlib.sha256(np.ascontiguousarray(frame).tobytes()).hexdigest() for frame in np.asarray(frames)]


def _digests(frames: np.ndarray, full: Sequence[str]) -> tuple[str, list[str]]:
    """(digest of all frames, per-frame digests shown) of uint8 (T, H, W, 3) pixels whose per-frame SHA-256 are
    `full`; the shape enters the whole digest."""
    whole = hashlib.sha256(f"{tuple(frames.shape)}|{frames.dtype}".encode())
    for d in full:
        whole.update(d.encode())
    return whole.hexdigest(), [d[:FRAME_DIGEST_HEX] for d in full]


def _sent_positions(processor: Mapping | None, n: int) -> list[int] | None:
    sent = (processor or {}).get("frames_sent")
    if sent is None:
        return None
    sent = [int(i) for i in sent]
    if any(i < 0 or i >= n for i in sent):
        raise ValueError(f"processor_inputs.frames_sent {sent} out of range for {n} frames")
    return sent if sent != list(range(n)) else None


def frames_seen(frames: np.ndarray, timestamps: Sequence[float], frame_spec: str, *, meta: Mapping | None = None,
                media_type: str = "video", processor: Mapping | None = None,
                digests: Sequence[str] | None = None) -> dict:
    """The ledger of `frames` (uint8 (T, H, W, 3), what the captioner was given) taken at `timestamps` by
    `frame_spec`; `meta` is the frame cache's record of their decode (capeval.engine.frames.cache.frames_meta), and
    `processor` what the backend reported handing its processor (may be None). `digests`: `frame_digests(frames)`
    when already taken."""
    frames = np.asarray(frames)
    if digests is None or len(digests) != len(frames):
        digests = frame_digests(frames)
    proc = {k: v for k, v in dict(processor or {}).items() if v is not None}
    sent = _sent_positions(proc, len(frames))
    proc.pop("frames_sent", None)
    ts = [float(t) for t in timestamps] if len(timestamps) == len(frames) else [None] * len(frames)
    if sent is not None:
        frames, ts, digests = frames[sent], [ts[i] for i in sent], [digests[i] for i in sent]
    meta = meta or {}
    rate = meta.get("rate") if media_type != "image" else None
    rate = float(rate) if rate else None
    indices = [int(round(t * rate)) for t in ts] if rate and all(t is not None for t in ts) else None
    digest, per = _digests(frames, digests)
    ledger = {
        "ledger": LEDGER_VERSION,
        "decoder": meta.get("decoder"),
        "decoder_version": meta.get("decoder_version"),
        "media_type": media_type,
        "rate": rate,
        "frame_spec": frame_spec,
        "indices": indices,
        "timestamps": [None if t is None else round(t, 6) for t in ts],
        "n_frames": int(len(frames)),
        "frame_size": f"{frames.shape[2]}x{frames.shape[1]}" if frames.ndim == 4 and len(frames) else None,
        "digest": digest,
        "frame_digests": per,
    }
    if sent is not None:
        ledger["frames_sent"] = sent
    if proc:
        ledger["processor"] = proc
    return ledger


def ledger_text(ledger: Mapping | None) -> str | None:
    """The `frames_seen` column's text of a ledger (sorted keys, compact), None for None."""
    return None if ledger is None else json.dumps(ledger, sort_keys=True, separators=(",", ":"), default=str)


def read_ledger(text: str | None) -> dict | None:
    """A `frames_seen` cell read back (None when the row has none or it does not parse)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def compare_ledgers(a: Mapping | None, b: Mapping | None) -> dict:
    """Whether two ledgers (of one video) saw identical frames, and where they differ:

    {"status": "identical" | "differ" | "unknown", "reasons": [...], and when they differ: "a"/"b" (their indices,
    timestamps, frame_size, n_frames), "only_a"/"only_b" (indices, else timestamps, one side has and the other not),
    "positions" (frame positions whose pixels differ, when both have the same number of frames)}."""
    if a is None or b is None:
        return {"status": "unknown", "reasons": ["no ledger recorded" + (" for a" if a is None else "")
                                                 + (" for b" if b is None and a is not None else "")]}
    if a.get("digest") == b.get("digest"):
        return {"status": "identical", "n_frames": a.get("n_frames"), "digest": a.get("digest")}
    reasons = []
    for field, what in (("n_frames", "frame count"), ("indices", "frame indices"), ("timestamps", "timestamps"),
                        ("frame_size", "frame size"), ("decoder_version", "decoder version")):
        if a.get(field) != b.get(field):
            reasons.append(what)
    if not reasons:
        reasons.append("pixels (same frames, sizes and decoder)")
    key = "indices" if a.get("indices") is not None and b.get("indices") is not None else "timestamps"
    av, bv = list(a.get(key) or []), list(b.get(key) or [])
    out = {"status": "differ", "reasons": reasons, "by": key,
           "a": {k: a.get(k) for k in ("frame_spec", "indices", "timestamps", "n_frames", "frame_size")},
           "b": {k: b.get(k) for k in ("frame_spec", "indices", "timestamps", "n_frames", "frame_size")},
           "only_a": sorted(set(av) - set(bv)), "only_b": sorted(set(bv) - set(av))}
    fa, fb = a.get("frame_digests") or [], b.get("frame_digests") or []
    if len(fa) == len(fb):
        out["positions"] = [i for i, (x, y) in enumerate(zip(fa, fb)) if x != y]
    return out
