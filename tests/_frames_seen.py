"""The frames-seen arithmetic of each tiny VLM family (capeval.testing.random_vlm_families): how many video placeholder
tokens N frames of H x W must become in the model's prompt, computed from the checkpoint's own config and processor
settings, never read back from a backend. Shared by the vLLM and the transformers captioners' tests
(tests/adapters/test_vllm_video_families.py, tests/adapters/test_transformers_captioner.py), so both backends are held
to the same count.

    EXPECTED_TOKENS[family](model_dir, n_frames, height, width) -> int
    VIDEO_TOKEN[family]: the placeholder vLLM expands (transformers' InternVL expands its image token instead)
"""

from __future__ import annotations

import json
import math


def _json(d, name: str) -> dict:
    return json.loads((d / name).read_text())


def _qwen_resize(h: int, w: int, factor: int, min_pixels: int, max_pixels: int, frames: int = 1) -> tuple[int, int]:
    """Qwen's smart_resize: sides to multiples of `factor`, pixel count (over `frames` for Qwen3-VL videos) within
    [min_pixels, max_pixels], aspect kept."""
    hb, wb = max(factor, round(h / factor) * factor), max(factor, round(w / factor) * factor)
    if frames * hb * wb > max_pixels:
        beta = math.sqrt(frames * h * w / max_pixels)
        hb = max(factor, math.floor(h / beta / factor) * factor)
        wb = max(factor, math.floor(w / beta / factor) * factor)
    elif frames * hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (frames * h * w))
        hb, wb = math.ceil(h * beta / factor) * factor, math.ceil(w * beta / factor) * factor
    return hb, wb


def _video_processor_config(d) -> dict:
    """The saved video processor settings (transformers 5 keeps them in processor_config.json)."""
    if (d / "video_preprocessor_config.json").exists():
        return _json(d, "video_preprocessor_config.json")
    return _json(d, "processor_config.json")["video_processor"]


def _qwen_video_tokens(d, n: int, h: int, w: int) -> int:
    video = _video_processor_config(d)
    patch, merge, tps = video["patch_size"], video["merge_size"], video["temporal_patch_size"]
    size = video.get("size") or {}
    min_px = size.get("shortest_edge", video.get("min_pixels"))
    max_px = size.get("longest_edge", video.get("max_pixels"))
    t = math.ceil(n / tps)  # an odd count is padded with a copy of the last frame
    qwen3 = _json(d, "config.json")["model_type"] == "qwen3_vl"
    hb, wb = _qwen_resize(h, w, patch * merge, min_px, max_px, frames=t * tps if qwen3 else 1)
    return t * (hb // patch) * (wb // patch) // merge**2


def _llava_onevision_video_tokens(d, n: int, h: int, w: int) -> int:
    """Every frame squashed to the vision tower's square, its patch grid pooled 2x2 (ceil), one newline per video."""
    vision = _json(d, "config.json")["vision_config"]
    grid = vision["image_size"] // vision["patch_size"]
    return n * math.ceil(grid / 2) ** 2 + 1


def _llava_next_video_tokens(d, n: int, h: int, w: int) -> int:
    """Every frame cropped to the vision tower's square, its patch grid average-pooled by spatial_pool_stride (ceil);
    no newline token."""
    cfg = _json(d, "config.json")
    grid = cfg["vision_config"]["image_size"] // cfg["vision_config"]["patch_size"]
    return n * math.ceil(grid / cfg.get("spatial_pool_stride", 2)) ** 2


def _internvl_video_tokens(d, n: int, h: int, w: int) -> int:
    """Every frame one tile (never split) of image_seq_length tokens: (side / patch * downsample_ratio)^2."""
    cfg = _json(d, "config.json")
    side, patch = cfg["vision_config"]["image_size"], cfg["vision_config"]["patch_size"]
    side, patch = (side[0] if isinstance(side, list) else side), (patch[0] if isinstance(patch, list) else patch)
    per_frame = int(side // patch * cfg["downsample_ratio"]) ** 2
    assert per_frame == cfg["image_seq_length"]
    return n * per_frame


VIDEO_TOKEN = {"qwen2_vl": "<|video_pad|>", "qwen2_5_vl": "<|video_pad|>", "qwen3_vl": "<|video_pad|>",
               "llava_onevision": "<video>", "llava_next_video": "<video>", "internvl3": "<video>"}  # fmt: skip
EXPECTED_TOKENS = {"qwen2_vl": _qwen_video_tokens, "qwen2_5_vl": _qwen_video_tokens, "qwen3_vl": _qwen_video_tokens,
                   "llava_onevision": _llava_onevision_video_tokens, "llava_next_video": _llava_next_video_tokens,
                   "internvl3": _internvl_video_tokens}  # fmt: skip


def qwen3_timestamps(ts) -> list[str]:
    """Qwen3-VL writes one "<t seconds>" per temporal patch: the mean time of its 2 frames (last frame repeated)."""
    ts = list(ts) + ([ts[-1]] if len(ts) % 2 else [])
    return [f"<{(ts[i] + ts[i + 1]) / 2:.1f} seconds>" for i in range(0, len(ts), 2)]
