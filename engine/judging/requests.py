"""Request rows (REQUESTS_WITH_CONTEXT) -> capeval.adapters.base.JudgeRequest, loading frames as JPEG bytes when sending."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from capeval.adapters.base import JudgeRequest
from capeval.engine.frames.cache import is_locator, load_encoded_frames
from capeval.engine.keys import reask_key, resend_key
from capeval.engine.protocols.base import REASK_TEMPERATURE, RequestContext, reask_seed


@lru_cache(maxsize=64)
def load_jpegs(frames_path: str, quality: int = 90) -> tuple[bytes, ...]:
    """JPEG bytes of the frames at `frames_path`: an .npy of uint8 (T, H, W, 3) (capeval.engine.schemas.FRAMES.path), a
    directory of .jpg files, or one .jpg file; a frame-cache locator gives its stored JPEG bytes (never re-encoded)."""
    if is_locator(frames_path):
        return load_encoded_frames(frames_path)
    path = Path(frames_path)
    if path.is_dir():
        return tuple(p.read_bytes() for p in sorted(path.glob("*.jp*g")))
    if path.suffix.lower() in (".jpg", ".jpeg"):
        return (path.read_bytes(),)
    if path.suffix.lower() == ".npy":
        import numpy as np

        from capeval.engine.frames.shards import encode_jpegs

        frames = np.load(path)
        if frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(f"{path}: expected uint8 frames (T, H, W, 3), got shape {frames.shape}")
        return encode_jpegs(frames, quality)
    raise ValueError(f"{path}: frames must be an .npy array, a .jpg, or a directory of .jpg files")


def to_judge_request(row: dict, *, attempt: int = 0, ctx: RequestContext | None = None,
                     reask_temperature: float | None = REASK_TEMPERATURE) -> JudgeRequest:
    """The backend request for a row. attempt > 0 is a re-ask with its own cache key (derived from the original
    one, so each attempt is cached separately): with `reask_temperature` None the request is resent unchanged
    (same seed and sampling, as official scripts re-ask); otherwise at that temperature with a derived seed (a
    re-ask at temperature 0 would repeat the same malformed answer). `ctx`: the row's decoded context, if at hand."""
    ctx = RequestContext.decode(row.get("context")) if ctx is None else ctx
    images = load_jpegs(ctx.frames_path) if ctx.frames_path else ()
    key, temperature, seed = attempt_sampling(row, attempt, ctx, reask_temperature)
    return JudgeRequest(
        key=key, user=row["user"], system=row.get("system"),
        choices=tuple(row["choices"]) if row.get("choices") else None, json_schema=row.get("json_schema"),
        images=images, max_tokens=None if row.get("max_tokens") is None else int(row["max_tokens"]),
        temperature=temperature, seed=seed,
        task=ctx.task, fields={k: v if isinstance(v, str) else json.dumps(v) for k, v in ctx.fields.items()},
        meta={"item_id": row.get("item_id"), "step": row.get("step"), "sub_index": int(row.get("sub_index") or 0),
              "seed": int(row["seed"] or 0), "trial": int(row.get("trial") or 0), "attempt": int(attempt)},
    )


def attempt_sampling(row: dict, attempt: int, ctx: RequestContext,
                     reask_temperature: float | None = REASK_TEMPERATURE) -> tuple[str, float | None, int | None]:
    """(cache key, temperature, seed) of the row's `attempt`-th ask, as `to_judge_request` sends it; temperature
    or seed None: none sent (the backend's default). Transcripts record the same values without building the
    request."""
    temperature = None if ctx.temperature is None else float(ctx.temperature)  # None: the backend's default
    seed = int(row["seed"] or 0)
    if attempt and reask_temperature is not None:
        seed, temperature = reask_seed(seed, attempt), float(reask_temperature)
    if not ctx.send_seed:  # the official scripts send none: every ask, re-asks included, is a new draw
        seed = None
    return attempt_key(row["request_key"], attempt, reask_temperature), temperature, seed


def attempt_key(request_key: str, attempt: int, reask_temperature: float | None = REASK_TEMPERATURE) -> str:
    """The cache key of a row's `attempt`-th ask (0 = the request key itself). A re-ask resent unchanged
    (reask_temperature None) is another sample of the same request (official scripts resend and take the new
    answer): its own key per attempt, distinct from a re-ask at a temperature; a non-default re-ask temperature is
    part of the key too (the default keeps the keys of existing caches)."""
    if not attempt:
        return request_key
    if reask_temperature is None:
        return resend_key(request_key, attempt)
    if float(reask_temperature) != REASK_TEMPERATURE:
        return reask_key(request_key, attempt, float(reask_temperature))
    return reask_key(request_key, attempt)
