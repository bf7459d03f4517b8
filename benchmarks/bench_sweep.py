"""`capeval bench sweep [--json] [--quick] [--scale]`: overlapped vs staged sweep; --scale: 100k judge requests.

The `"sweep"` section of `capeval bench judge`: a 4-cell sweep run with captioning and judging overlapped (the
default) against the same sweep stage after stage (`[options] overlap = false`), in the same process.

Workload: generated videos (engine/datasets/synthetic_videos.py through the `synthetic` dataset kind, made once and
read by both runs as an items table), 2 prompts x 2 frame counts = 4 cells, quiz items (4 per video) judged with
8 seeds; the local captioner with an injected caption latency (`latency_s`, one caption actor: a stand-in for a
captioning model) and the OpenAI-compatible judge against a loopback server in its own process whose latency is
lognormal (median 0.3 s, sigma 0.8, as bench_streaming), 64 in flight. The sizes are chosen so that the caption
stage and the judge stage take about as long (a video's 4 captions take 4 x 0.1 s plus ~0.25 s of decoding and
bookkeeping here; they release up to 128 requests, which 64 in flight at a mean latency of 0.41 s answer in ~0.7 s),
which is where overlapping matters most: stage after stage takes their sum, overlapped about the longer one plus
what neither can overlap (starting the caption actor, the last answers, the cells' metrics). Each run writes to a
fresh folder (nothing cached); runs alternate.

`--scale` runs the `"scale"` section instead: a quiz judge sweep with its captions given (a
`[[captions]]` file: nothing is captioned, so the engine's judge path is what is measured) against the same
lognormal loopback server at 512 in flight (`[[judges]] params max_in_flight = 512`). The items (4 per video) and
captions are synthetic text written straight to JSONL files, before and outside the timings. Each size (25,000,
50,000 and 100,000 requests; `--quick`: 2,500, 5,000, 10,000) is its own sweep into a fresh run folder, run in a
fresh child process so that its peak RSS and its CPU time are its own (the server runs in another process, so
`engine_cpu_ms_per_request` is the engine's: the child's CPU time over the sweep / requests sent). Each row: wall
time, requests/s and its share of the bound (512 / the server's mean latency = 1,240/s), peak RSS, engine CPU per
request and the files in the run folder; and `model_share`, what a client with no overhead of its own could reach
on that run (benchmarks/window_model.py: the last requests' lognormal tail drains the window at the end), with the
judge's tail hedging (`hedge`, its default) and without (`model_share_unhedged`), and `share_of_model` = share /
`model_share`. Then the largest sweep is run again on its finished folder (`rerun_s`, nothing sent) against its first run (`first_s`).

`capeval bench sweep [--json] [--quick] [--scale]` (or `python -m capeval.benchmarks.bench_sweep`) prints the
figures and the targets table (benchmarks/targets.py), or with --json the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
from capeval.benchmarks.window_model import model_share
from capeval.adapters.openai_http import HTTPConfig
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
    """Generated videos and their quiz items as an items table (both runs read the same files)."""
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


# ---- --scale: 100,000 judge requests through one sweep ------------------------------------------------------------

SCALE_IN_FLIGHT = 512
ITEMS_PER_VIDEO = 4
SCALE_SIZES = (25_000, 50_000, 100_000)
SCALE_SIZES_QUICK = (2_500, 5_000, 10_000)
_TASKS = ("scene", "counting", "object", "action")
_WORDS = ("red", "blue", "green", "yellow", "circle", "square", "triangle", "moves", "left", "right", "up", "down",
          "stays", "still", "background", "white", "black", "grey", "two", "three", "shapes", "quickly", "slowly")


def scale_data(root: Path, n_videos: int) -> tuple[Path, Path]:
    """Quiz items (4 per video: question, 5 options, answer) and one caption per video, as JSONL files
    (text only, no media: the captions come from the file). Deterministic in n_videos; ~1 s per 100,000 items."""
    root.mkdir(parents=True, exist_ok=True)
    items, captions = root / "items.jsonl", root / "captions.jsonl"
    with items.open("w") as fi, captions.open("w") as fc:
        for v in range(n_videos):
            video_id = f"v{v:06d}"
            words = [_WORDS[(v * 7 + k * 13) % len(_WORDS)] for k in range(24)]
            fc.write(json.dumps({"video_id": video_id, "caption": f"Video {v}: " + " ".join(words) + ".",
                                 "captioner": "given"}) + "\n")
            for q, task in enumerate(_TASKS):
                options = [f"{task} option {(v + k) % 9}" for k in range(5)]
                fi.write(json.dumps({
                    "benchmark": "capquiz", "task": task, "item_id": f"{video_id}/{task}", "video_id": video_id,
                    "media_type": "video", "annotation": f"Question {q} about video {v}: which {task} is shown?",
                    "options": options, "answer": options[(v + q) % 5], "category": "Setting"}) + "\n")
    return items, captions


def _scale_sweep_text(items: Path, captions: Path, base_url: str) -> str:
    judge = {"base_url": base_url, "model": "loopback", "api_key": "bench", "structured": "vllm", "timeout_s": 60.0,
             "max_in_flight": SCALE_IN_FLIGHT}
    params = ", ".join(f"{k} = {json.dumps(v)}" for k, v in judge.items())
    return f"""\
name = "scale"

[[datasets]]
name = "quiz"
kind = "items"
path = "{items}"

[[captions]]
path = "{captions}"

[[protocols]]
name = "capquiz"

[[judges]]
name = "openai"
params = {{ {params} }}

[options]
n_resamples = 20
"""


def _count_files(folder: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(folder))


def _scale_child(sweep_file: Path, out: Path) -> dict:
    """One sweep in this (fresh) process: its wall time, CPU time and sent requests; peak RSS of the process."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = run_sweep(load_sweep(sweep_file), out, progress=False, log=lambda m: None)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"wall_s": wall, "cpu_s": cpu, "sent": result.judge_stats.get("sent", 0),
            "cached": result.judge_stats.get("cached", 0), "exit_code": result.exit_code,
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _run_child(sweep_file: Path, out: Path) -> dict:
    code = ("import json, sys; from pathlib import Path; from capeval.benchmarks.bench_sweep import _scale_child; "
            f"print('RESULT ' + json.dumps(_scale_child(Path({str(sweep_file)!r}), Path({str(out)!r}))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"scale sweep failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(line[len("RESULT "):])


def scale(quick: bool = False, *, sizes: tuple[int, ...] | None = None) -> dict:
    """One sweep per size (requests: a multiple of 4) in a fresh run folder and process, then a rerun of the last."""
    sizes = tuple(sizes or (SCALE_SIZES_QUICK if quick else SCALE_SIZES))
    mean_latency = MEDIAN_S * math.exp(SIGMA**2 / 2)
    bound = SCALE_IN_FLIGHT / mean_latency
    rows: list[dict] = []
    cfg = FaultConfig(latency_median_s=MEDIAN_S, latency_sigma=SIGMA, log_attempts=False, lifetime_s=3600.0)
    with tempfile.TemporaryDirectory(prefix="capeval-bench-scale-") as tmp, \
            LoopbackServer(cfg, mode="process") as server:
        root = Path(tmp)
        t_data = time.perf_counter()
        data = {n: scale_data(root / f"data-{n}", n // ITEMS_PER_VIDEO) for n in sizes}
        data_s = time.perf_counter() - t_data
        for n in sizes:
            sweep_file = root / f"scale-{n}.toml"
            sweep_file.write_text(_scale_sweep_text(*data[n], server.base_url))
            got = _run_child(sweep_file, root / f"out-{n}")
            if got["sent"] != n or got["exit_code"] != 0:
                raise RuntimeError(f"scale sweep of {n} requests: sent {got['sent']}, exit {got['exit_code']}")
            achieved = got["sent"] / got["wall_s"]
            rows.append({"requests": n, "wall_s": round(got["wall_s"], 2), "requests_per_s": round(achieved, 1),
                         "share": round(achieved / bound, 3), "peak_rss_mb": got["peak_rss_mb"],
                         "engine_cpu_ms_per_request": round(1000 * got["cpu_s"] / got["sent"], 4),
                         "files": _count_files(root / f"out-{n}")})
        last = sizes[-1]
        rerun = _run_child(root / f"scale-{last}.toml", root / f"out-{last}")
        if rerun["sent"] != 0:
            raise RuntimeError(f"the rerun of the finished sweep sent {rerun['sent']} requests")
        files_after_rerun = _count_files(root / f"out-{last}")
    # What a client with no overhead could reach at each size (benchmarks/window_model.py): the drain of the last
    # requests' lognormal tail caps the share below 1 even then, more at the smaller sizes; with the judge's tail
    # hedging (its default `hedge`, which these sweeps use) much less. Computed after the runs, outside their clocks.
    hedge = HTTPConfig.__dataclass_fields__["hedge"].default
    for row in rows:
        hedged = model_share(row["requests"], SCALE_IN_FLIGHT, MEDIAN_S, SIGMA, hedge=hedge)
        plain = model_share(row["requests"], SCALE_IN_FLIGHT, MEDIAN_S, SIGMA, hedge=0)
        row["model_share"], row["model_share_unhedged"] = hedged["share"], plain["share"]
        row["share_of_model"] = round(row["share"] / hedged["share"], 3)
    return {
        "sizes": rows, "first_s": rows[-1]["wall_s"], "rerun_s": round(rerun["wall_s"], 2),
        "rerun_files": files_after_rerun, "rerun_peak_rss_mb": rerun["peak_rss_mb"],
        "bound_per_s": round(bound, 1), "in_flight": SCALE_IN_FLIGHT, "hedge": hedge,
        "latency": {"median_s": MEDIAN_S, "sigma": SIGMA, "mean_s": round(mean_latency, 3)},
        "items_per_video": ITEMS_PER_VIDEO, "data_generation_s": round(data_s, 2),
        "load_avg_1min": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="capeval bench sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scale", action="store_true",
                    help="the scale section (100,000 judge requests at 512 in flight) instead of overlapped vs staged")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    out: dict = {"scale": scale(args.quick)} if args.scale else {"sweep": sweep(args.quick)}
    found = verdicts(SWEEP, out)
    out["targets"] = as_json(found)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for name, section in out.items():
            if name != "targets":
                print(figures(name, section))
                for row in section.get("sizes", ()):
                    print(figures(f"  {row['requests']:,} requests", row))
        print(targets_table(found, quick=args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
