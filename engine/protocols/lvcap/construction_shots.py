"""Shots and shot captions for `capeval construct lvcap`: the two local steps before the LLM ones.

scenes    PySceneDetect's content detector on each video (engine/frames/scenes.py), the paper's first step
captions  each shot captioned by a captioner backend (the paper uses Tarsier2): `per_shot` frames at the centres of
          equal parts of the shot (one decode of the video with the spec `segments:at=<cuts>,per=<per_shot>`), sent
          with the shot caption prompt

Both are content-keyed and stored as they finish, beside the run's outputs (<out>/shots/, <out>/shot_captions/:
Parquet segment stores), so a rerun, or a killed run started again, detects and captions nothing it already has. A
shot list is keyed by the video's bytes and the detector settings; a caption by the video's bytes, the shot's times,
the frame spec and size, the captioner's name, revision and settings (credentials left out) and the prompt text. The
captioner is built only when some shot still needs a caption.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from capeval.adapters.base import CaptionRequest, CaptionResponse
from capeval.engine.construct.base import ConstructContext, RecordLog, StepStats
from capeval.engine.frames.cache import video_digest
from capeval.engine.frames.decode import decode_frames
from capeval.engine.frames.sampling import FrameSpec, Segments, Uniform
from capeval.engine.frames.scenes import SceneDetectionError, ShotList, detect_shots
from capeval.engine.frames.sizes import frame_size_for, size_text
from capeval.engine.keys import content_key
from capeval.engine.reasoning import strip_caption, tags_of
from capeval.engine.registry import lookup
from capeval.engine.secrets import without_secrets

SHOTS = pa.schema([pa.field("shots_key", pa.string()), pa.field("video_id", pa.string()),
                   pa.field("shots", pa.string())])  # ShotList.as_dict() as JSON
SHOT_CAPTIONS = pa.schema([
    pa.field("caption_key", pa.string()), pa.field("video_id", pa.string()), pa.field("shot", pa.int32()),
    pa.field("text", pa.string()), pa.field("error", pa.string()), pa.field("n_tokens", pa.int64()),
    pa.field("latency_s", pa.float64()),
])
MAX_TOKENS = 512


@dataclass
class CaptionerSpec:
    name: str
    params: dict
    prompt: str
    per_shot: int
    max_tokens: int = MAX_TOKENS

    def revision(self) -> str:
        """The captioner's weights identity without loading it, exactly as sweeps key captions."""
        from capeval.engine.sweep.runner import component_revision  # deferred: the sweep runner, for one function

        return component_revision("captioner", self)

    def build(self):
        return lookup("captioner", self.name)(**self.params)


def detect_all(videos: list[dict], out: Path, *, threshold: float, min_shot_s: float, ctx: ConstructContext,
               log: RecordLog) -> dict[str, ShotList]:
    """{video_id: shots} for every video that could be read; a video that could not is recorded and left out."""
    from capeval.engine.store import SegmentStore  # deferred: sqlite and the stores

    store = SegmentStore(out / "shots", SHOTS)
    known = {r["shots_key"]: r["shots"] for r in store.read().to_pylist()}
    stats = ctx.stats.setdefault("scenes", StepStats())
    result: dict[str, ShotList] = {}
    for v in videos:
        vid, path = v["video_id"], v["media_path"]
        stats.asks += 1
        try:
            key = content_key("lvcap-shots", video_digest(path), float(threshold), float(min_shot_s))
        except OSError as exc:
            stats.fail(f"video unreadable: {exc}")
            log.add("scenes", vid, vid, kept=False, reason=f"video unreadable: {exc}")
            continue
        if key in known:
            shots = ShotList.from_dict(json.loads(known[key]))
            stats.cached += 1
        else:
            try:
                shots = detect_shots(path, threshold=threshold, min_shot_s=min_shot_s)
            except SceneDetectionError as exc:
                stats.fail(str(exc))
                log.add("scenes", vid, vid, kept=False, reason=str(exc))
                continue
            store.append(pa.Table.from_pylist([{"shots_key": key, "video_id": vid,
                                                "shots": json.dumps(shots.as_dict())}], schema=SHOTS))
            stats.sent += 1
        log.add("scenes", vid, vid, kept=True, output={"cuts": list(shots.cuts), "duration": shots.duration},
                reason=f"{len(shots.shots)} shots (content detector, threshold {threshold:g}, min shot "
                       f"{min_shot_s:g} s)")
        result[vid] = shots
    return result


def _frame_spec(shots: ShotList, per_shot: int) -> FrameSpec:
    """The video's frame spec: `per_shot` frames in each shot."""
    cuts = [c for c in shots.cuts if 0 < c < shots.duration]
    return Segments(per_shot, boundaries=tuple(cuts)) if cuts else Uniform(per_shot)


def caption_all(videos: list[dict], shots: dict[str, ShotList], spec: CaptionerSpec, out: Path,
                ctx: ConstructContext, log: RecordLog) -> dict[str, list[str | None]]:
    """{video_id: [caption of each shot, None where it failed]}, captions stored as each video's finish."""
    from capeval.engine.store import SegmentStore  # deferred: sqlite and the stores

    store = SegmentStore(out / "shot_captions", SHOT_CAPTIONS)
    done = {r["caption_key"]: r for r in store.read().to_pylist() if r["error"] is None}
    stats = ctx.stats.setdefault("captions", StepStats())
    size = frame_size_for(spec.params)
    identity = [spec.name, spec.revision(), without_secrets(spec.params), spec.prompt, spec.max_tokens,
                size_text(size)]
    captioner = None
    result: dict[str, list[str | None]] = {}
    try:
        for v in videos:
            vid = v["video_id"]
            if vid not in shots:
                continue
            frame_spec = _frame_spec(shots[vid], spec.per_shot)
            digest = video_digest(v["media_path"])
            keys = [content_key("lvcap-shot-caption", digest, s.start, s.end, str(frame_spec), *identity)
                    for s in shots[vid].shots]
            stats.asks += len(keys)
            todo = [i for i, k in enumerate(keys) if k not in done]
            stats.cached += len(keys) - len(todo)
            if todo:
                captioner = captioner or spec.build()
                rows = _caption_video(v, shots[vid], frame_spec, size, keys, todo, captioner, spec)
                stats.sent += len(todo)
                store.append(pa.Table.from_pylist(rows, schema=SHOT_CAPTIONS))
                done.update({r["caption_key"]: r for r in rows if r["error"] is None})
                errors = {r["shot"]: r["error"] for r in rows if r["error"] is not None}
            else:
                errors = {}
            texts = []
            for i, key in enumerate(keys):
                row = done.get(key)
                texts.append(row["text"] if row else None)
                if row is None:
                    stats.fail(f"caption failed: {errors.get(i + 1, 'no caption')}")
                log.add("captions", f"{vid}/shot{i + 1}", vid, kept=row is not None,
                        output=row["text"] if row else None,
                        reason="captioned" if row else f"caption failed: {errors.get(i + 1, 'no caption')}")
            result[vid] = texts
    finally:
        if captioner is not None:
            captioner.close()
    return result


def _caption_video(video: dict, shots: ShotList, frame_spec: FrameSpec, size, keys: list[str], todo: list[int], captioner,
                   spec: CaptionerSpec) -> list[dict]:
    """Caption rows of the shots `todo` (indices) of one video: one decode, one request per shot."""
    try:
        decoded = decode_frames(video["media_path"], frame_spec, size)
    except Exception as exc:  # noqa: BLE001 - every shot of this video fails with the decoder's reason
        return [{"caption_key": keys[i], "video_id": video["video_id"], "shot": i + 1, "text": None,
                 "error": f"decode failed: {type(exc).__name__}: {exc}"} for i in todo]
    ts = tuple(float(t) for t in decoded.timestamps)
    # each frame's shot (0-based) by its timestamp against the cuts
    shot_of = np.searchsorted(np.asarray(shots.cuts, dtype=float), np.asarray(ts, dtype=float), side="right")
    by_shot = {int(s): np.flatnonzero(shot_of == s).tolist() for s in np.unique(shot_of)}
    requests, missing = [], {}
    for i in todo:
        idx = by_shot.get(i)
        if not idx:
            missing[i] = "no frame of the decoded video falls in this shot"
            continue
        requests.append((i, CaptionRequest(keys[i], spec.prompt, decoded.frames[np.asarray(idx)],
                                           tuple(ts[k] for k in idx), max_tokens=spec.max_tokens)))
    try:
        responses = captioner.caption([r for _, r in requests]) if requests else []
    except Exception as exc:  # noqa: BLE001 - the backend failed the whole call: each shot's row says so
        responses = [CaptionResponse(r.key, None, f"captioner raised: {type(exc).__name__}: {exc}")
                     for _, r in requests]
    tags = tags_of(captioner)
    rows = [{"caption_key": keys[i], "video_id": video["video_id"], "shot": i + 1, "text": None, "error": why}
            for i, why in missing.items()]
    for (i, _), r in zip(requests, responses):
        r = strip_caption(r, tags)
        rows.append({"caption_key": keys[i], "video_id": video["video_id"], "shot": i + 1, "text": r.text,
                     "error": r.error if r.text is None else None, "n_tokens": int(r.n_tokens or 0),
                     "latency_s": float(r.latency_s or 0.0)})
    return sorted(rows, key=lambda r: r["shot"])
