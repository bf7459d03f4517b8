"""The `vllm_ceiling` sections of `capeval bench judge` and `capeval bench caption`: capeval's vLLM backends on the
sweep path against vLLM's own offline `LLM.generate` over the same prompts at once (the ceiling), as
`vllm bench throughput` measures an engine (NVIDIA's Cosmos-Curate reports its captioning against it).

Judge (`judge_ceiling`): SmolLM2-135M-Instruct, the judge bench's prompts (a real release, gpt-4o-0806's captions,
first step only). capeval's side is `run_judging` (the judge loop a sweep runs: cells, the in-flight window at the
judge's own `max_in_flight`, the judge's `stream()`, the group committer writing the judgment cache, parsing) with the
in-process vLLM judge; vLLM's side is one `LLM.generate(prompts, params)` on the SAME engine with the TokensPrompt and
SamplingParams the judge builds for each request (`VLLMJudge.engine_request`), tokenized before the clock starts.
Captioner (`caption_ceiling`): a tiny random-weight Qwen2-VL (engine/root/testing/random_vlm_families.py), each
request one 4-frame video. capeval's side is `run_caption_stage` (the caption stage a sweep runs: a Ray caption
actor with the vLLM captioner, its window, frames read in the actor, rows appended to a segment store); vLLM's side is
one `LLM.generate` over the same prompts and multi_modal_data (`VLLMCaptioner.engine_inputs`, `sampling_params`) on an
engine built in this process with the same options once the stage's actor is gone.

Equal work on both sides: free-text requests, `max_tokens` fixed per run and `ignore_eos=True` (the backends'
`ignore_eos` option), so every request yields exactly `max_tokens` tokens whatever the weights say; the same
temperature and seed per request (the same SamplingParams). Both sides' requests and output tokens are counted and
must be equal (`token_counts_equal`); prompt tokens are counted on both sides too.

Timing: each side's wall time from handing over the first request to the last answer. The judge alternates the two
sides on one warmed-up engine (prefix cache emptied before every run), `rounds` times, and keeps each side's fastest
run (noise from other work on the machine only slows a run). The caption stage starts a fresh engine in its Ray
actor and cannot be warmed up from outside, so vLLM's side runs the same way: a fresh engine with the same options in
a Ray worker with the caption actor's CPUs and GPUs (on CPU, Ray gives it one OpenMP thread, as the actor gets),
whose first `generate` is timed; the stage's time is its `work_s` (first request to last row stored, the model load
apart). `engine_steps` / `between_steps_s` (time outside the engine's `step`) show how each side fed the engine:
the model's compute varies from run to run on a busy machine, the time between steps is the caller's.

    judge_ceiling(data, quick, model_dir=None, say=print) -> dict
    caption_ceiling(quick, say=print) -> dict
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from capeval.adapters.base import CaptionRequest
from capeval.adapters.checkpoints import model_cache
from capeval.adapters.smollm2 import build_smollm2
from capeval.adapters.vllm_captioner import VLLMCaptioner
from capeval.adapters.vllm_engine import VLLMJudge
from capeval.benchmarks.judge_endpoint import read_inputs
from capeval.engine.judging.requests import RequestContext, to_judge_request
from capeval.engine.judging.runner import run_judging
from capeval.engine.ray_local import init_ray
from capeval.engine.registry import lookup
from capeval.engine.schemas import CAPTIONS
from capeval.engine.stages.caption import actor_cpus, run_caption_stage
from capeval.engine.stages.caption_worker import CaptionTask, load_task_frames
from capeval.engine.store.segments import SegmentStore
from capeval.testing.random_vlm_families import build_tiny_vlm

SIZES = {  # (requests, output tokens per request, rounds)
    "judge": {True: (16, 16, 1), False: (128, 64, 2)},
    "caption": {True: (64, 32, 1), False: (256, 64, 2)},
}
#: the judge workload, as bench_judge's: a real release's judge prompts and captions (../shared/data)
RELEASE = "capability"


def _rates(requests: int, out_tokens: int, prompt_tokens: int, seconds: float) -> dict:
    return {"requests": requests, "output_tokens": out_tokens, "prompt_tokens": prompt_tokens,
            "seconds": round(seconds, 3), "requests_per_s": round(requests / seconds, 3) if seconds else None,
            "output_tokens_per_s": round(out_tokens / seconds, 1) if seconds else None}


def _compare(runs: dict[str, list[dict]]) -> dict:
    """Each side's fastest run, `capeval / vllm` of its rates, and whether every run of both sides counted the same
    requests, output tokens and prompt tokens."""
    best = {side: min(rs, key=lambda x: x["seconds"]) for side, rs in runs.items()}

    def ratio(k: str):
        a, b = best["capeval"].get(k), best["vllm"].get(k)
        return round(a / b, 3) if a and b else None

    counts = {(r["requests"], r["output_tokens"], r["prompt_tokens"]) for rs in runs.values() for r in rs}
    return {"capeval": best["capeval"], "vllm": best["vllm"], "runs": runs,
            "requests_per_s_ratio": ratio("requests_per_s"),
            "output_tokens_per_s_ratio": ratio("output_tokens_per_s"), "token_counts_equal": len(counts) == 1}


def _load() -> list[float] | None:
    """The machine's 1/5/15-minute load averages (what else ran beside the measurement)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _device() -> str:
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return f"cpu ({os.cpu_count()} cores visible)"
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else str(current_platform.device_name)


def _vllm_version() -> str:
    import vllm

    return vllm.__version__


class StepClock:
    """Counts an engine's steps and the time spent inside them while active (a wrapper on the engine instance's
    `step`, removed on exit). Wall time minus step time is what the side spent between steps: on a busy machine
    the model's own compute varies run to run, that part is the caller's overhead."""

    def __init__(self, engine):
        self.engine, self.steps, self.in_step_s = engine, 0, 0.0

    def __enter__(self):
        inner = self.engine.step

        def step(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.steps += 1
                self.in_step_s += time.perf_counter() - t0

        self.engine.step = step
        return self

    def __exit__(self, *exc) -> None:
        del self.engine.step  # the instance attribute goes; the class's step is back

    def figures(self, wall_s: float) -> dict:
        return {"engine_steps": self.steps, "in_engine_step_s": round(self.in_step_s, 3),
                "between_steps_s": round(max(0.0, wall_s - self.in_step_s), 3)}


def engine_dtype() -> str:
    """bf16 weights run as float32 on CPUs without native bf16 (no avx512_bf16 / amx_bf16): emulated bf16 matmuls
    are several times slower there. The checkpoint itself stays bf16."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "auto"
    return "auto" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"


# -- judge ---------------------------------------------------------------------------------------------------------

def judge_requests(data: Path, n: int, max_tokens: int, trials: int = 4, seed: int = 0,
                   spare: int = 0) -> tuple[pa.Table, pa.Table]:
    """(measured, warm-up) first-step request tables of RELEASE, free text of `max_tokens` tokens: the first `n` rows
    (and `spare` more) in the protocol's order of items drawn at random, each asked by `trials` judge seeds (as
    judge-variance runs do; a request's trials are adjacent, so the prefix cache serves all but the first)."""
    items, captions, _ = read_inputs(data / RELEASE / "annotations", data / RELEASE / "captions" / "gpt-4o-0806",
                                     RELEASE)
    ids = sorted(set(items.column("item_id").to_pylist()))
    random.Random(seed).shuffle(ids)
    protocol = lookup("protocol", RELEASE)
    rows: list[int] = []
    table = None
    for take in (n + spare, 4 * (n + spare), len(ids)):  # enough items for n + spare rows with a caption
        kept = items.filter(pc.is_in(items.column("item_id"), value_set=pa.array(ids[:take])))
        table = protocol.build_requests(kept, captions, judge="smollm2-ceiling", judge_revision="ceiling",
                                        seeds=list(range(trials)))
        rows = [i for i, c in enumerate(table.column("context").to_pylist()) if not RequestContext.decode(c).missing]
        if len(rows) >= n + spare:
            break
    if len(rows) < n + spare:
        raise ValueError(f"the release gives {len(rows)} requests with a caption; {n + spare} wanted")

    def free_text(idx: list[int]) -> pa.Table:
        t = table.take(pa.array(idx, pa.int64()))
        for name, value in (("choices", None), ("json_schema", None), ("max_tokens", max_tokens)):
            i = t.schema.get_field_index(name)
            t = t.set_column(i, t.schema.field(i), pa.array([value] * t.num_rows, t.schema.field(i).type))
        return t

    return free_text(rows[:n]), free_text(rows[n:n + spare])


def _timed_generate(llm, inputs: list, params: list) -> dict:
    """vLLM's side: one `LLM.generate` over every prepared input with its SamplingParams, timed from the call to
    its return, with its engine steps, requests and tokens."""
    with StepClock(llm.llm_engine) as clock:
        t0 = time.perf_counter()
        outputs = llm.generate(inputs, params, use_tqdm=False)
        wall = time.perf_counter() - t0
    out = _rates(len(outputs), sum(len(o.outputs[0].token_ids) for o in outputs),
                 sum(len(o.prompt_token_ids) for o in outputs), wall)
    return {**out, **clock.figures(wall)}


def _judge_generate(judge, table: pa.Table) -> dict:
    pairs = [judge.engine_request(to_judge_request(row)) for row in table.to_pylist()]
    judge.reset_prefix_cache()
    return _timed_generate(judge.llm, [p for p, _ in pairs], [s for _, s in pairs])


def _judge_sweep_path(judge, table: pa.Table, cache_dir: Path) -> dict:
    before = dict(judge.prefix_cache_stats())
    judge.reset_prefix_cache()
    with StepClock(judge.llm.llm_engine) as clock:
        t0 = time.perf_counter()
        verdicts = run_judging(table, judge, cache_dir=cache_dir, protocol=RELEASE, max_reasks=0, max_steps=1,
                               progress=False, use_cache=False)
        wall = time.perf_counter() - t0
    after = judge.prefix_cache_stats()
    out = _rates(int(after["requests"] - before["requests"]),
                 int(after["completion_tokens"] - before["completion_tokens"]),
                 int(after["prompt_tokens"] - before["prompt_tokens"]), wall)
    out["verdict_rows"] = verdicts.num_rows
    return {**out, **clock.figures(wall)}


def judge_ceiling(data: Path, quick: bool, model_dir: Path | None = None, say=lambda m: None, *,
                  model: str | None = None, sizes: tuple[int, int, int] | None = None,
                  engine_options: dict | None = None) -> dict:
    """capeval's vLLM judge through `run_judging` against `LLM.generate` on the same engine (module docstring).
    `model`: a model folder or hub id (default: SmolLM2, built in `model_dir` when missing); `engine_options`: more
    VLLMJudge options. On a GPU the same call runs as it is (vLLM's GPU defaults, weights in their own dtype)."""
    from vllm.platforms import current_platform


    n, max_tokens, rounds = sizes or SIZES["judge"][quick]
    model = model or str(build_smollm2(model_dir))
    table, warm = judge_requests(data, n, max_tokens, spare=8)
    options = dict(name="ceiling", max_model_len=4096, block_size=32,
                   dtype=engine_dtype() if current_platform.is_cpu() else "auto",
                   enable_prefix_caching=True, ignore_eos=True)
    options.update(engine_options or {})
    say(f"vllm_ceiling: {n} judge requests x {max_tokens} tokens, {rounds} round(s) each side")
    load_before = _load()
    t0 = time.perf_counter()
    judge = VLLMJudge(model, **options)
    start_s = time.perf_counter() - t0
    runs: dict[str, list[dict]] = {"capeval": [], "vllm": []}
    try:
        sched = judge.llm.llm_engine.vllm_config.scheduler_config
        _judge_generate(judge, warm)  # warm-up: the first steps' one-time costs, on neither side's clock
        with tempfile.TemporaryDirectory(prefix="capeval-ceiling-") as tmp:
            for r in range(rounds):  # alternating: a slow spell of the machine hits both sides alike
                runs["capeval"].append(_judge_sweep_path(judge, table, Path(tmp) / f"cache-{r}"))
                runs["vllm"].append(_judge_generate(judge, table))
                say(f"vllm_ceiling: round {r + 1}: capeval {runs['capeval'][-1]['seconds']} s, "
                    f"vllm {runs['vllm'][-1]['seconds']} s")
        window = judge.max_in_flight
    finally:
        judge.close()
    return {
        "model": Path(model).name, "vllm_version": _vllm_version(), "device": _device(),
        "load_average": {"before": load_before, "after": _load()},
        "engine": {"dtype": options["dtype"], "max_model_len": options["max_model_len"],
                   "max_num_seqs": int(sched.max_num_seqs),
                   "max_num_batched_tokens": int(sched.max_num_batched_tokens),
                   "prefix_caching": options["enable_prefix_caching"], "block_size": options["block_size"],
                   "kv_cache_space_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE"), "start_s": round(start_s, 1)},
        "workload": {"requests": n, "max_tokens": max_tokens, "prompts": f"{RELEASE} first-step judge prompts "
                     "(gpt-4o-0806 captions), free text", "rounds": rounds, "capeval_window": window},
        "equal_lengths": "ignore_eos=True and the same max_tokens on every request, the same SamplingParams "
                         "(temperature, seed) on both sides; requests and tokens counted on both sides",
        "capeval_path": "run_judging (judge loop, stream(), judgment cache written) on the in-process vLLM judge",
        "vllm_path": "LLM.generate(all TokensPrompts, their SamplingParams) on the same engine",
        "timing": f"alternating, {rounds} round(s) after a warm-up, prefix cache emptied before each run; "
                  "each side's fastest run",
        **_compare(runs),
    }


# -- captioner -----------------------------------------------------------------------------------------------------

FAMILY = "qwen2_vl"
N_FRAMES, SIDE = 4, 64
CAPTION_PROMPT = "Describe the video in detail."


def caption_tasks(root: Path, n: int, max_tokens: int, seed: int = 0, tag: str = "c") -> list[CaptionTask]:
    """`n` caption tasks, each with its own random 4-frame video stored as the frame cache's `.npy` frames (read
    in the caption actor through `load_task_frames`, as every task's frames are)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    timestamps = tuple(0.25 + 0.5 * k for k in range(N_FRAMES))
    tasks = []
    for i in range(n):
        path = root / f"{tag}{i:04d}.npy"
        np.save(path, rng.integers(0, 256, (N_FRAMES, SIDE, SIDE, 3), dtype=np.uint8))
        tasks.append(CaptionTask(f"{tag}{i}", f"video-{tag}{i}", str(path), timestamps, f"uniform:{N_FRAMES}",
                                 "ceiling", CAPTION_PROMPT, max_tokens=max_tokens))
    return tasks


def _caption_request(task: CaptionTask) -> CaptionRequest:
    """The CaptionRequest the caption stage sends for a plain video task (timestamps_mode "none": the prompt as
    written)."""
    frames, _ = load_task_frames(task)
    return CaptionRequest(task.caption_key, task.prompt_text, frames, task.timestamps, max_tokens=task.max_tokens)


def _caption_generate(cap: VLLMCaptioner, tasks: list[CaptionTask]) -> dict:
    requests = [_caption_request(t) for t in tasks]
    return _timed_generate(cap.llm, [cap.engine_inputs(r) for r in requests],
                           [cap.sampling_params(r) for r in requests])


def _caption_stage(params: dict, tasks: list[CaptionTask], root: Path, gpus: float) -> dict:
    rows: list[dict] = []
    stats = run_caption_stage(iter(tasks), captioner="vllm", params=params, store=SegmentStore(root, CAPTIONS),
                              gpus_per_actor=gpus, progress=False, on_rows=rows.extend)
    ok = [r for r in rows if r["error"] is None]
    out = _rates(len(ok), sum(r["n_tokens"] for r in ok), sum(r["prompt_tokens"] for r in ok),
                 float(stats["work_s"]))
    in_step = float(stats.get("in_engine_step_s", 0.0))
    out.update(engine_steps=int(stats.get("engine_steps", 0)), in_engine_step_s=round(in_step, 3),
               between_steps_s=round(max(0.0, float(stats["work_s"]) - in_step), 3),
               failed=int(stats["failed"]), load_s=stats["load_s"],
               errors=sorted({r["error"] for r in rows if r["error"] is not None})[:3])
    return out


def generate_in_worker(options: dict, tasks: list[CaptionTask]) -> dict:
    """vLLM's side of the caption ceiling, run as a Ray task with the caption actor's resources: an engine with
    `options` (VLLMCaptioner's, so the same engine arguments), then one timed `generate` on it, its first (the
    caption stage's engine is as fresh: its first requests pay the same one-time costs)."""
    t0 = time.perf_counter()
    cap = VLLMCaptioner(**options)
    start_s = time.perf_counter() - t0
    try:
        sched = cap.llm.llm_engine.vllm_config.scheduler_config
        engine = {"max_num_seqs": int(sched.max_num_seqs), "max_num_batched_tokens": int(sched.max_num_batched_tokens),
                  "max_model_len": options["max_model_len"], "start_s": round(start_s, 1),
                  "kv_cache_space_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
                  "torch_threads": _torch_threads()}
        return {"engine": engine, "window": cap.max_in_flight,
                "vllm": _caption_generate(cap, tasks), "device": _device(), "vllm_version": _vllm_version()}
    finally:
        cap.close()


def _torch_threads() -> int:
    import torch  # deferred: loaded by vLLM already where this runs

    return torch.get_num_threads()


def caption_ceiling(quick: bool, say=lambda m: None, *, model: str | None = None,
                    sizes: tuple[int, int, int] | None = None, engine_options: dict | None = None) -> dict:
    """capeval's vLLM captioner through `run_caption_stage` against `LLM.generate` over the same prompts and frames
    on an engine built with the same options, in a Ray worker with the caption actor's CPUs and GPUs (module
    docstring). `model`: a VLM folder or hub id (default: the tiny random Qwen2-VL); `engine_options`: more
    VLLMCaptioner options."""
    import ray  # deferred: Ray's import costs a second, and only this section needs it

    n, max_tokens, rounds = sizes or SIZES["caption"][quick]
    model = model or str(build_tiny_vlm(FAMILY, model_cache() / f"tiny-{FAMILY.replace('_', '-')}"))
    options = dict(model=model, max_model_len=1024, seed=0, skip_mm_profiling=True, ignore_eos=True)
    options.update(engine_options or {})
    say(f"vllm_ceiling: {n} captions x {max_tokens} tokens, {rounds} round(s) each side")
    load_before = _load()
    started_ray = not ray.is_initialized()
    init_ray()
    try:
        gpus = 1.0 if ray.cluster_resources().get("GPU") else 0.0  # a sweep's default: one GPU per caption actor
        resources = {"num_cpus": 0 if gpus else actor_cpus("vllm"), "num_gpus": gpus}
        with tempfile.TemporaryDirectory(prefix="capeval-ceiling-") as tmp:
            root = Path(tmp)
            tasks = caption_tasks(root / "frames", n, max_tokens)
            # one worker process for this call alone (max_calls=1), so its engine is gone before the stage starts
            remote = ray.remote(max_calls=1, **resources)(generate_in_worker)
            runs: dict[str, list[dict]] = {"capeval": [], "vllm": []}
            for r in range(rounds):  # alternating, each on a fresh engine
                side = ray.get(remote.remote(options, tasks))
                runs["vllm"].append(side["vllm"])
                runs["capeval"].append(_caption_stage(options, tasks, root / f"captions-{r}", gpus))
                say(f"vllm_ceiling: round {r + 1}: capeval {runs['capeval'][-1]['seconds']} s, "
                    f"vllm {runs['vllm'][-1]['seconds']} s")
    finally:
        if started_ray:
            ray.shutdown()
    return {
        "model": Path(model).name, "vllm_version": side["vllm_version"], "device": side["device"],
        "load_average": {"before": load_before, "after": _load()},
        "engine": side["engine"], "ray_resources": resources,
        "workload": {"requests": n, "max_tokens": max_tokens, "frames": f"{N_FRAMES} random frames {SIDE}x{SIDE}, "
                     "one video per request", "prompt": CAPTION_PROMPT, "capeval_window": side["window"]},
        "equal_lengths": "ignore_eos=True and the same max_tokens on every request, the same SamplingParams "
                         "(temperature, seed) on both sides; requests and tokens counted on both sides",
        "capeval_path": "run_caption_stage (one Ray caption actor, the vLLM captioner streaming, frames read in "
                        "the actor, rows stored); its work_s, the model load apart",
        "vllm_path": "LLM.generate(all prompts with their multi_modal_data, their SamplingParams) on an engine with "
                     "the same options, in a Ray worker with the caption actor's resources",
        "timing": f"alternating, {rounds} round(s), each run on a fresh engine (the stage starts its own in its "
                  "actor): vLLM's first generate, the stage's work time (model load apart); each side's fastest run",
        **_compare(runs),
    }
