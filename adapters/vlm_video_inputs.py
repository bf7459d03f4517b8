"""What each VLM family's vLLM processor needs to take decoded frames as one video, and see exactly those frames.

vLLM 0.32 parses `multi_modal_data={"video": item}` where item is a (T, H, W, 3) uint8 array or a pair
(array, metadata). Families whose processor computes timing from the metadata (Qwen2.5-VL, Qwen3-VL, GLM-4.1V,
LLaVA-OneVision-2, ...) reject a bare array ("Video metadata is required"); the others drop the metadata. So every
video is sent as (frames, metadata), with `do_sample_frames=False` both in the metadata (where vLLM's GLM-4.1V and
Qwen3-VL paths read it) and in `mm_processor_kwargs` (where the HF video processors read it; Qwen3-VL's and
GLM-4.1V's released configs default to sampling, i.e. they would re-pick frames from the ones given).

The metadata describes the frames the frame spec chose on a 1 kHz clock built from their timestamps:
`frames_indices[i] = round(1000 * t_i)`, `fps = 1000`, `total_num_frames = round(1000 * duration)`. Processors use
the metadata only through `frames_indices / fps` (Qwen3-VL's and GLM-4.1V's per-frame timestamps in the prompt) and
`len(frames_indices) / total_num_frames * fps` (Qwen2.5-VL's frames per second, i.e. seconds per temporal patch in
its multimodal RoPE), so both come out in real seconds without knowing the source video's frame rate. `duration`
is estimated from the timestamps as last + half the mean interval (exact for `uniform:N` segment centres).

How many frames the model then sees, per family (tests/adapters/test_vllm_video_families.py checks each against
the placeholder tokens in the processed prompt):

- Qwen2-VL / Qwen2.5-VL / Qwen3-VL / GLM-4.1V: every frame; an odd count is padded with a copy of the last frame to
  a multiple of `temporal_patch_size` (2), so T = ceil(n / 2) temporal patches of merged patches.
- InternVL3/3.5 (HF-native `InternVLForConditionalGeneration`): every frame as one tile of `image_seq_length` tokens.
- LLaVA-OneVision, LLaVA-NeXT-Video (LLaVA-Video's HF-native form; lmms-lab's LLaVA-Video-7B-Qwen2 has no
  transformers class and runs through LLaVA-OneVision's): every frame, pooled.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

CLOCK_HZ = 1000.0  # the metadata's frame clock: millisecond frame indices (see the module docstring)

def video_metadata(n_frames: int, timestamps: Sequence[float] = ()) -> dict:
    """The metadata dict of `n_frames` frames taken at `timestamps` (seconds; empty: one frame per second)."""
    if n_frames <= 0:
        raise ValueError("a video needs at least one frame")
    ts = np.asarray(list(timestamps) if len(timestamps) == n_frames else np.arange(n_frames), dtype=float)
    if not np.all(np.isfinite(ts)) or np.any(np.diff(ts) < 0):
        ts = np.arange(n_frames, dtype=float)  # unusable timing: say one frame per second rather than fail
    step = float((ts[-1] - ts[0]) / (n_frames - 1)) if n_frames > 1 else 1.0
    if step <= 0:
        step = 1.0
    duration = float(ts[-1] + step / 2)
    indices = [int(i) for i in np.round(ts * CLOCK_HZ)]
    for i in range(1, n_frames):  # strictly increasing: frames closer than 1 ms still get their own index
        indices[i] = max(indices[i], indices[i - 1] + 1)
    total = max(int(round(duration * CLOCK_HZ)), int(indices[-1]) + 1)
    return {"fps": CLOCK_HZ, "frames_indices": indices, "total_num_frames": total,
            "duration": total / CLOCK_HZ, "video_backend": "capeval", "do_sample_frames": False}  # fmt: skip


def check_frames(frames) -> np.ndarray:
    """`frames` as a C-contiguous uint8 (T, H, W, 3) array with T >= 1; ValueError naming what is wrong."""
    if not isinstance(frames, np.ndarray) or frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        got = getattr(frames, "shape", type(frames).__name__), getattr(frames, "dtype", None)
        raise ValueError(f"frames must be uint8 (T, H, W, 3), got shape/dtype {got}")
    if len(frames) == 0:
        raise ValueError("frames is empty")
    return np.ascontiguousarray(frames)


def video_input(frames: np.ndarray, timestamps: Sequence[float] = ()) -> tuple[dict, dict]:
    """(multi_modal_data, mm_processor_kwargs) that make a vLLM VLM see exactly `frames` as one video."""
    frames = check_frames(frames)
    return ({"video": (frames, video_metadata(len(frames), timestamps))},
            {"do_sample_frames": False})  # fmt: skip
