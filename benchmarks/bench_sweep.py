"""`capeval bench sweep [--json] [--quick]`: a 4-cell sweep with captioning and judging overlapped vs stage after stage.

The `"sweep"` section of `capeval bench judge`: a 4-cell sweep run with captioning and judging overlapped (the
default) against the same sweep stage after stage (`[options] overlap = false`), in the same process.

Workload: generated videos (engine/datasets/synthetic_videos.py through the `synthetic` dataset kind, made once and
read by both runs as an items table), 2 prompts x 2 frame counts = 4 cells, CapQuiz items (4 per video) judged with
8 seeds; the local captioner with an injected caption latency (`latency_s`, one caption actor: a stand-in for a
captioning model) and the OpenAI-compatible judge against a loopback server in its own process whose latency is
lognormal (median 0.3 s, sigma 0.8, as bench_streaming), 64 in flight. The sizes are chosen so that the caption
stage and the judge stage take about as long (a video's 4 captions take 4 x 0.1 s plus ~0.25 s of decoding and
bookkeeping here; they release up to 128 requests, which 64 in flight at a mean latency of 0.41 s answer in ~0.7 s),
which is where overlapping matters most: stage after stage takes their sum, overlapped about the longer one plus
what neither can overlap (starting the caption actor, the last answers, the cells' metrics). Each run writes to a
fresh folder (nothing cached); runs alternate.

`capeval bench sweep [--json] [--quick]` (or `python -m capeval.benchmarks.bench_sweep`) prints the figures and the
targets table (benchmarks/targets.py), or with --json the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
from capeval.benchmarks.targets import SWEEP, SWEEP_RATIO, as_json, figures, targets_table, verdicts
from capeval.engine.protocols.capquiz.dataset_kind import load
from capeval.engine.ray_local import init_ray
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

MEDIAN_S, SIGMA = 0.3, 0.8
SEEDS = tuple(range(8))


def _sweep_text(name: str, items: Path, base_url: str, latency_s: float, overlap: bool) -> str:
    judge = {"base_url": base_url, "model": "loopback", "api_key": "bench", "structured": "vllm", "timeout_s": 60.0}
    params = ", ".join(f"{k} = {json.dumps(v)}" for k, v in judge.items())
    return f"""\
name = "{name}"
prompts = ["capquiz_standard", "brief"]
frames = ["uniform:2", "uniform:4"]

[[datasets]]
name = "shapes"
kind = "items"
path = "{items}"

[[captioners]]
name = "local"
params = {{ latency_s = {latency_s} }}

[[protocols]]
name = "capquiz"

[[judges]]
name = "openai"
params = {{ {params} }}
seeds = {list(SEEDS)}

[options]
caption_actors = 1
batch_size = 1
n_resamples = 20
overlap = {"true" if overlap else "false"}
"""


def _items(root: Path, n_videos: int) -> Path:
    """Generated videos and their CapQuiz items as an items table (both runs read the same files)."""
    loaded = load({"n_videos": n_videos, "seed": 11, "duration_s": 1.0}, base_dir=root, out_dir=root / "data",
                  name="shapes")
    path = root / "data" / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in loaded.items.to_pylist()))
    return path


def sweep(quick: bool = True, *, n_videos: int | None = None, repeats: int | None = None,
          caption_latency_s: float = 0.1) -> dict:
    """Both runs `repeats` times (medians); `n_videos`/`repeats` override the quick/full sizes (tests use tiny ones)."""
    import ray

    n_videos = n_videos or (24 if quick else 48)
    repeats = repeats or (1 if quick else 2)
    started_ray = not ray.is_initialized()
    init_ray()  # once, before timing: both runs use the same local Ray
    try:
        return _measure(n_videos, repeats, caption_latency_s)
    finally:
        if started_ray:  # leave the process as it was (the benchmark runs beside others)
            ray.shutdown()


def _measure(n_videos: int, repeats: int, caption_latency_s: float) -> dict:
    times: dict[bool, list[float]] = {True: [], False: []}
    counts: dict[bool, dict] = {}
    with tempfile.TemporaryDirectory(prefix="capeval-bench-sweep-") as tmp, \
            LoopbackServer(FaultConfig(latency_median_s=MEDIAN_S, latency_sigma=SIGMA), mode="process") as server:
        root = Path(tmp)
        items = _items(root, n_videos)
        for i in range(repeats):
            for overlap in (False, True) if i % 2 == 0 else (True, False):
                path = root / f"sweep-{overlap}-{i}.toml"
                path.write_text(_sweep_text(f"bench-{i}", items, server.base_url, caption_latency_s, overlap))
                t0 = time.perf_counter()
                result = run_sweep(load_sweep(path), root / f"out-{overlap}-{i}", progress=False, log=lambda m: None)
                times[overlap].append(time.perf_counter() - t0)
                counts[overlap] = {"cells": result.cells_run, "captions": result.caption_stats.get("captioned", 0),
                                   "judge_requests": result.judge_stats.get("sent", 0), "exit_code": result.exit_code}
    staged, overlapped = statistics.median(times[False]), statistics.median(times[True])
    if counts[True] != counts[False]:
        raise RuntimeError(f"the two runs did different work: {counts}")
    return {
        "cells": counts[True]["cells"], "videos": n_videos, "captions": counts[True]["captions"],
        "judge_requests": counts[True]["judge_requests"], "caption_latency_s": caption_latency_s,
        "judge_latency": {"median_s": MEDIAN_S, "sigma": SIGMA, "in_flight": 64},
        "stage_after_stage_s": round(staged, 2), "overlapped_s": round(overlapped, 2),
        "ratio": round(overlapped / staged, 3), "runs_each": repeats, "target_ratio": SWEEP_RATIO.bound,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="capeval bench sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    out: dict = {"sweep": sweep(args.quick)}
    found = verdicts(SWEEP, out)
    out["targets"] = as_json(found)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(figures("sweep", out["sweep"]))
        print(targets_table(found, quick=args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
