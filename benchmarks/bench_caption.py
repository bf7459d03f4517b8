"""`capeval bench caption [--json] [--quick]`: the caption stage's throughput against its concurrency bound.

Section `http`: a caption-only sweep (default sweep options) of generated H.264 videos (engine/datasets/
synthetic_videos.py, read through the `videos` dataset kind) against an OpenAI-compatible captioner: the loopback
server (benchmarks/loopback_server.py) in its own process, latency lognormal (median 0.3 s, sigma 0.8, mean
0.3 * exp(0.8^2 / 2) = 0.413 s), `max_in_flight = 64`. The bound is 64 / 0.413 s = 155 captions/s; `share` =
captions_per_s / bound_per_s (targets: benchmarks/targets.py, CAPTION). `captions_per_s` counts the caption
stage's work time (first request to last caption; decoding streams inside it), not the captioner's start-up
(`load_s`, shown apart) or writing the results. `hedged_requests`: copies of the last requests the captioner sent into
the slots their drain left idle (its `hedge` option, on by default; the server still sees at most 64 at once). Baseline, same run, same server, same frames and prompt: the old
batch loop (`CaptionWorker.caption` on 4 videos at a time, the next batch only after the slowest of the four came
back), on the first `baseline_videos`.

Section `vllm`: the vLLM captioner, streaming vs batch-of-4 on a tiny random VLM on CPU
(benchmarks/bench_caption_vllm.py).

Section `vllm_ceiling`: the caption stage with the vLLM captioner against vLLM's own `LLM.generate` over the same
prompts and frames, equal output lengths (benchmarks/vllm_ceiling.py; --ceiling-model for another VLM, e.g. on a GPU).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

from capeval.benchmarks.bench_caption_vllm import vllm_section as measure
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
from capeval.benchmarks.vllm_ceiling import caption_ceiling
from capeval.benchmarks.targets import (CAPTION, CAPTION_SHARE_500, as_json, figures, targets_table,
                                        verdicts)
from capeval.engine.datasets.synthetic_videos import make_video
from capeval.engine.errors import UsageError
from capeval.engine.prompts_library import get_prompt
from capeval.engine.protocols.capquiz.dataset_kind import SIZE
from capeval.engine.ray_local import init_ray
from capeval.engine.stages.caption import CaptionTask, CaptionWorker
from capeval.engine.stages.decode import decode_stream
from capeval.engine.sweep.config import load_sweep
from capeval.engine.sweep.runner import run_sweep

MEDIAN_S, SIGMA, IN_FLIGHT = 0.3, 0.8, 64
PROMPT, FRAMES = "brief", "uniform:4"
SECTIONS = ("http", "vllm", "vllm_ceiling")


def bound_per_s(in_flight: int = IN_FLIGHT, median_s: float = MEDIAN_S, sigma: float = SIGMA) -> float:
    """Captions per second with `in_flight` requests always outstanding: in_flight / mean latency."""
    return in_flight / (median_s * math.exp(sigma**2 / 2))


def make_videos(root: Path, n: int) -> list[tuple[str, str]]:
    """`n` small generated H.264 clips under root (made once per run, outside the timings)."""
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        path = root / f"clip-{i:04d}.mp4"
        make_video(path, codec="h264", seconds=1.0, fps=12, size=SIZE, seed=7000 + i)
        out.append((f"clip-{i:04d}", str(path)))
    return out


def captioner_params(base_url: str) -> dict:
    return {"base_url": base_url, "model": "loopback", "api_key": "bench", "max_in_flight": IN_FLIGHT,
            "timeout_s": 60.0}


def sweep_text(videos_dir: Path, base_url: str) -> str:
    params = ", ".join(f"{k} = {json.dumps(v)}" for k, v in captioner_params(base_url).items())
    return (f'name = "bench-caption"\nprompts = ["{PROMPT}"]\nframes = ["{FRAMES}"]\n\n'
            f'[[datasets]]\nname = "clips"\nkind = "videos"\npath = "{videos_dir}"\n\n'
            f'[[captioners]]\nname = "openai"\nparams = {{ {params} }}\n')


def batch_loop(videos: list[tuple[str, str]], frames_dir: Path, base_url: str, batch: int = 4) -> dict:
    """The old caption loop: `batch` videos per call, each call waiting for its slowest request."""
    text = get_prompt(PROMPT).text
    rows = [r for rs in decode_stream(videos, [FRAMES], cache_dir=str(frames_dir), progress=False) for r in rs]
    tasks = [CaptionTask(f"baseline/{r['video_id']}", r["video_id"], r["path"], tuple(r["timestamps"] or ()),
                         r["frame_spec"], PROMPT, text, max_tokens=2048) for r in rows if r.get("failure") is None]
    worker = CaptionWorker("openai", captioner_params(base_url))
    try:
        t0 = time.perf_counter()
        out = [row for i in range(0, len(tasks), batch) for row in worker.caption(tasks[i:i + batch])]
        elapsed = time.perf_counter() - t0
    finally:
        worker.close()
    ok = sum(1 for r in out if r["error"] is None)
    return {"videos": len(tasks), "captioned": ok, "seconds": round(elapsed, 2),
            "captions_per_s": round(ok / elapsed, 2), "batch": batch}


def steady_per_s(first_arrivals: list, in_flight: int = IN_FLIGHT) -> float | None:
    """Requests per second while the window is full: arrivals after the first `in_flight` (each one answers a
    completion) over the time they took, from the server's log of each distinct request's first arrival
    (`first_arrivals`: hedge copies and retries send the same body again and are no more captions). The start
    (filling the window) and the end (the last requests draining, ~2 s at this latency whatever the client does) are
    what it leaves out."""
    times = sorted(first_arrivals)
    if len(times) <= in_flight + 1 or times[-1] <= times[in_flight]:
        return None
    return (len(times) - 1 - in_flight) / (times[-1] - times[in_flight])


def http_section(quick: bool, *, n_videos: int | None = None, baseline_videos: int | None = None,
                 say=lambda m: None) -> dict:
    """The streaming sweep and the batch-loop baseline against one loopback server (sizes overridable for tests)."""
    import ray

    n_videos = n_videos or (500 if quick else 5000)  # a full run long enough to amortise filling and draining
    baseline_videos = baseline_videos or (48 if quick else 120)
    started_ray = not ray.is_initialized()
    init_ray()
    try:
        with tempfile.TemporaryDirectory(prefix="capeval-bench-caption-") as tmp, \
                LoopbackServer(FaultConfig(latency_median_s=MEDIAN_S, latency_sigma=SIGMA, lifetime_s=1800.0),
                               mode="process") as server:
            root = Path(tmp)
            t0 = time.perf_counter()
            videos = make_videos(root / "videos", n_videos)
            say(f"{n_videos} videos generated in {time.perf_counter() - t0:.0f} s")
            path = root / "sweep.toml"
            path.write_text(sweep_text(root / "videos", server.base_url))
            t0 = time.perf_counter()
            result = run_sweep(load_sweep(path), root / "out", progress=False, log=lambda m: None)
            wall = time.perf_counter() - t0
            stats = result.caption_stats
            server_stats = server.stats()
            peak, steady = server_stats.get("max_in_flight"), steady_per_s(server_stats.get("first_arrivals") or [])
            say(f"streaming: {stats.get('captioned')} captions, stage {stats.get('work_s')} s")
            base = batch_loop(videos[:baseline_videos], root / "baseline-frames", server.base_url)
            say(f"batch loop: {base['captions_per_s']} captions/s")
    finally:
        if started_ray:
            ray.shutdown()
    captioned, work_s = int(stats.get("captioned", 0)), float(stats.get("work_s") or 0.0)
    rate = captioned / work_s if work_s else 0.0
    bound = bound_per_s()
    return {
        "videos": n_videos, "captioned": captioned, "failed": int(stats.get("failed", 0)),
        "exit_code": result.exit_code, "captions_per_s": round(rate, 2), "bound_per_s": round(bound, 1),
        "share": round(rate / bound, 3), "target_share": CAPTION_SHARE_500.bound,
        "steady_per_s": round(steady, 2) if steady else None,
        "steady_share": round(steady / bound, 3) if steady else None, "stage_work_s": round(work_s, 2),
        "captioner_load_s": stats.get("load_s"), "sweep_wall_s": round(wall, 2), "server_max_in_flight": peak,
        # copies of the last requests sent into the slots their drain left idle (the captioner's `hedge` option)
        "hedged_requests": int(stats.get("hedged_requests", 0)),
        "latency": {"median_s": MEDIAN_S, "sigma": SIGMA, "in_flight": IN_FLIGHT},
        "options": "defaults (caption_actors = 1, nothing else set)", "prompt": PROMPT, "frames": FRAMES,
        "batch_loop_baseline": base,
        "speedup_vs_batch_loop": round(rate / base["captions_per_s"], 1) if base["captions_per_s"] else None,
    }


def vllm_section(quick: bool, say=lambda m: None) -> dict:
    return measure(quick, say)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="capeval bench caption", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="500 videos and a 48-video baseline (default: 5,000 and 120)")
    p.add_argument("--videos", type=int, default=None, help="videos in the streaming sweep")
    p.add_argument("--ceiling-model", default=None,
                   help="vllm_ceiling: a VLM folder or hub id (default: a tiny random Qwen2-VL)")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections (default: all)")
    args = p.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise UsageError(f"--only: unknown section(s) {unknown} (known: {', '.join(SECTIONS)})")
    if args.videos is not None and args.videos < 1:
        raise UsageError(f"--videos: expected at least 1, got {args.videos}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

    def say(msg: str) -> None:
        print(f"[bench caption] {msg}", file=sys.stderr, flush=True)

    result: dict = {"quick": args.quick}
    for name in sections:
        t0 = time.perf_counter()
        say(f"{name} ...")
        try:
            result[name] = (http_section(args.quick, n_videos=args.videos, say=say) if name == "http"
                            else caption_ceiling(args.quick, say, model=args.ceiling_model)
                            if name == "vllm_ceiling" else vllm_section(args.quick, say))
        except Exception as exc:  # noqa: BLE001 - one section failing leaves the others' figures
            result[name] = {"note": f"failed: {type(exc).__name__}: {exc}"}
        say(f"{name}: {time.perf_counter() - t0:.0f} s")
    found = verdicts(CAPTION, result)
    result["targets"] = as_json(found)
    if args.json:
        print(json.dumps(result))
    else:
        for name in sections:
            print(figures(name, result[name]))
        print(targets_table(found, quick=args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
