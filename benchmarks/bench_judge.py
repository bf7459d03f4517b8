"""`capeval bench judge [--json] [--quick]`: judge throughput of the vLLM engine with and without prefix reuse.

Workload: many questions per caption, as the QA-style protocols produce them. Real captions
(shared/data/capability/captions/gpt-4o-0806) and real question text (shared/data/vdc/detailed.jsonl); every prompt
is instructions, then the caption, then the question, with a structured yes/no/not-mentioned answer.

Two runs with the same model, engine settings and requests, in one process:
  grouped  - the questions of one caption adjacent, prefix caching ON (how engine/ orders judge requests);
  shuffled - the same requests in a seeded random order on a second engine instance built with
             enable_prefix_caching=False (the baseline: every prompt prefilled from scratch).
Each engine is warmed up on unrelated prompts first (not timed, and sharing no caption with the workload).
The HTTP client entry comes from benchmarks/http_loopback.py (OpenAI-compatible client vs an instant local server).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("CAPEVAL_SHARED_DATA", REPO.parent / "shared" / "data"))

INSTRUCTIONS = (
    "You are a strict judge of video descriptions. You are given a caption written by a captioning model for one "
    "video, followed by a question about that video. Decide from the caption alone whether the question can be "
    "answered, and if so whether the caption supports the answer. Do not use outside knowledge. Do not guess. If "
    "the caption does not mention the object, action, attribute or event the question asks about, answer "
    "'not mentioned'. If the caption mentions it and supports a positive answer, answer 'yes'; if it mentions it "
    "and contradicts the question, answer 'no'. Answer with exactly one of: yes, no, not mentioned."
)
CHOICES = ("yes", "no", "not mentioned")


def load_workload(data: Path, n_captions: int, n_questions: int):
    from adapters.base import JudgeRequest

    caps: list[tuple[str, str]] = []
    for task in ("action", "event", "scene", "object_color"):
        with open(data / "capability" / "captions" / "gpt-4o-0806" / f"{task}.jsonl", encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                caps.append((f"{task}/{row['file_id']}", row["caption"]))
    rng = random.Random(0)
    rng.shuffle(caps)
    question_sets: list[list[str]] = []
    with open(data / "vdc" / "detailed.jsonl", encoding="utf-8") as fh:
        for line in fh:
            for qa in json.loads(line).values():
                qs = [q["question"] for q in qa if q.get("question")]
                if len(qs) >= n_questions:
                    question_sets.append(qs[:n_questions])
            if len(question_sets) >= n_captions:
                break
    if len(question_sets) < n_captions:
        raise SystemExit(f"{data}/vdc/detailed.jsonl: only {len(question_sets)} videos with >= {n_questions} questions")
    warm = [(cid, c) for cid, c in caps[n_captions : n_captions + 4]]
    reqs = [
        JudgeRequest(key=f"{cid}#{j}", system=INSTRUCTIONS, user=f"Caption: {cap}\n\nQuestion: {q}?",
                     choices=CHOICES, max_tokens=8, seed=j, fields={"caption": cap})
        for (cid, cap), qs in zip(caps[:n_captions], question_sets) for j, q in enumerate(qs)
    ]  # fmt: skip
    warmup = [JudgeRequest(key=f"warm{i}", system="Warm-up.", user=f"{c}\nQuestion: what happens?",
                           choices=CHOICES, max_tokens=4) for i, (_, c) in enumerate(warm)]  # fmt: skip
    return reqs, warmup


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else 0.0


def run_engine(model_dir: Path, requests, warmup, *, prefix_caching: bool, batch: int, block_size: int | None):
    from adapters.vllm_engine import VLLMJudge

    kw = {"block_size": block_size} if block_size else {}
    t0 = time.perf_counter()
    judge = VLLMJudge(model_dir, max_model_len=4096, enable_prefix_caching=prefix_caching, **kw)
    start_s = time.perf_counter() - t0
    try:
        judge.judge(warmup)
        t0 = time.perf_counter()
        out = []
        for i in range(0, len(requests), batch):
            out.extend(judge.judge(requests[i : i + batch]))
        wall = time.perf_counter() - t0
    finally:
        judge.close()
    errors = [r.error for r in out if r.error]
    if errors:
        raise RuntimeError(f"{len(errors)} judge errors, first: {errors[0]}")
    prompt = sum(r.prompt_tokens for r in out)
    cached = sum(r.cached_prompt_tokens for r in out)
    gen = sum(r.completion_tokens for r in out)
    lat = [r.latency_s for r in out]
    return {
        "prefix_caching": prefix_caching,
        "n_prompts": len(out),
        "wall_s": round(wall, 3),
        "engine_start_s": round(start_s, 1),
        "prompts_per_s": round(len(out) / wall, 2),
        "prompt_tokens_per_s": round(prompt / wall, 1),
        "generated_tokens_per_s": round(gen / wall, 1),
        "prompt_tokens": prompt,
        "cached_prompt_tokens": cached,
        "cache_hit_share": round(cached / prompt, 4) if prompt else 0.0,
        "latency_p50_s": round(_pct(lat, 0.5), 3),
        "latency_p99_s": round(_pct(lat, 0.99), 3),
        "answers": {c: sum(r.text == c for r in out) for c in CHOICES},
    }, {r.key: r.text for r in out}


def http_client_entry(quick: bool) -> dict:
    try:
        from benchmarks.http_loopback import measure_http_client
    except ImportError as exc:
        return {"requests_per_s": None, "in_flight": 64, "note": f"not measured: {exc}"}
    try:
        return measure_http_client(in_flight=64, n_requests=1000 if quick else 5000)
    except Exception as exc:  # noqa: BLE001 - report, do not lose the engine numbers
        return {"requests_per_s": None, "in_flight": 64, "note": f"not measured: {type(exc).__name__}: {exc}"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--judge" or a.startswith("--judge=") for a in argv):  # the user's own judge
        from benchmarks.judge_endpoint import main as endpoint_main

        return endpoint_main(argv)
    p = argparse.ArgumentParser(prog="capeval bench judge", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="small workload (a few minutes on 2 cores)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--captions", type=int, default=None)
    p.add_argument("--questions", type=int, default=None, help="questions per caption")
    p.add_argument("--batch", type=int, default=512, help="requests per judge() call")
    p.add_argument("--block-size", type=int, default=None, help="KV cache block size (engine default if unset)")
    p.add_argument("--model-dir", type=Path, default=REPO / ".capeval" / "models" / "bench-lm")
    p.add_argument("--skip-http", action="store_true")
    args = p.parse_args(argv)
    n_captions = args.captions or (4 if args.quick else 12)
    n_questions = args.questions or (16 if args.quick else 20)

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    # vLLM logs to stdout; with --json, stdout must carry the JSON alone: send fd 1 to stderr until the end.
    real_stdout = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    try:
        result = _run(args, n_captions, n_questions)
    finally:
        sys.stdout.flush()
        os.dup2(real_stdout, 1)
        os.close(real_stdout)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for k in ("model", "grouped", "shuffled", "speedup", "targets", "http_client"):
            print(f"{k}: {result[k]}")
    return 0


def _run(args, n_captions: int, n_questions: int) -> dict:
    from adapters.random_models import BENCH_PRESET, build_bench_lm, count_parameters, default_corpus

    def say(msg: str) -> None:
        print(f"[bench judge] {msg}", file=sys.stderr, flush=True)

    say(f"building/reusing model at {args.model_dir}")
    model_dir = build_bench_lm(args.model_dir, corpus=default_corpus(args.data))
    n_params = count_parameters(model_dir)
    say(f"model: {n_params / 1e6:.1f}M parameters {BENCH_PRESET}")
    requests, warmup = load_workload(args.data, n_captions, n_questions)
    shuffled = list(requests)
    random.Random(1).shuffle(shuffled)

    say(f"baseline: {len(shuffled)} prompts, shuffled, prefix caching off")
    base, base_text = run_engine(model_dir, shuffled, warmup, prefix_caching=False, batch=args.batch,
                                 block_size=args.block_size)  # fmt: skip
    say(f"  {base['prompts_per_s']} prompts/s")
    say(f"grouped: {len(requests)} prompts, {n_questions} per caption, prefix caching on")
    grouped, grouped_text = run_engine(model_dir, requests, warmup, prefix_caching=True, batch=args.batch,
                                       block_size=args.block_size)  # fmt: skip
    say(f"  {grouped['prompts_per_s']} prompts/s, cache hit share {grouped['cache_hit_share']}")
    same = sum(grouped_text[k] == base_text[k] for k in grouped_text)
    http = {"requests_per_s": None, "in_flight": 64, "note": "not measured (--skip-http)"}
    if not args.skip_http:
        say("http client vs loopback server")
        http = http_client_entry(args.quick)

    result = {
        "model": {"path": str(model_dir), "parameters": n_params, "weights_mb": round(sum(
                      f.stat().st_size for f in model_dir.glob("*.safetensors")) / 2**20, 1), "engine_dtype": "auto", **BENCH_PRESET, "block_size": args.block_size,
                  "device": "cpu"},  # fmt: skip
        "workload": {"captions": n_captions, "questions_per_caption": n_questions, "prompts": len(requests),
                     "batch": args.batch, "data": str(args.data)},  # fmt: skip
        "grouped": grouped,
        "shuffled": base,
        "speedup": round(grouped["prompts_per_s"] / base["prompts_per_s"], 2),
        "same_answer_share": round(same / len(requests), 4),
        "targets": {"cache_hit_share>=0.75": grouped["cache_hit_share"] >= 0.75,
                    "speedup>=2": grouped["prompts_per_s"] >= 2 * base["prompts_per_s"]},  # fmt: skip
        "baseline_note": "shuffled = a second LLM instance with enable_prefix_caching=False, same settings",
        "latency_note": f"per request: engine time from queueing to last token, within judge() calls of "
                        f"{args.batch} requests (offline batches: dominated by queueing)",
        "http_client": http,
    }
    return result


if __name__ == "__main__":
    sys.exit(main())
