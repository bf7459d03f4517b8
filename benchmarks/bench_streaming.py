"""`capeval bench streaming [--json] [--quick] [streaming|overhead|scale]`: the streaming judge loop's speed.

Streaming judge loop benchmarks (issue 11), as functions returning dicts (wired into `capeval bench judge`).

- `streaming(quick)`: CAPability-shaped requests (the real release's items and captions, strict mode with JSON
  schemas) through `run_judging` and the OpenAI-compatible HTTP judge against a loopback server whose latency is
  lognormal (median 0.3 s, sigma 0.8), 64 in flight. `bound_per_s` = in flight / mean latency of that
  distribution (what a judge kept exactly 64-busy achieves); `share` = achieved / bound; `barrier_per_s` = the old
  loop (send 64, wait for the slowest, commit, next 64) measured in the same process on the same server.
- `overhead(quick)`: the same kind of requests (>= 100,000: the release's ~12k requests x judge seeds) through
  `run_judging` with an instant in-process streaming backend: engine CPU per request (process CPU time of the call,
  cache and commit thread and the protocol's parser included; building the requests is not counted), the parser's
  share measured alone on a sample, and the process's peak RSS.

`capeval bench streaming [--quick] [--json] [streaming|overhead|scale]` (or `python -m
capeval.benchmarks.bench_streaming`) prints each section's figures and the targets table (benchmarks/targets.py),
or with --json the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from capeval.adapters.base import JudgeResponse, StreamingJudge
from capeval.adapters.openai_http import OpenAIJudge
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer
from capeval.benchmarks.targets import (ENGINE_CPU, SCALE_RSS, STREAMING, STREAMING_SHARE, as_json, figures,
                                        targets_table, verdicts)
from capeval.engine.judging.requests import to_judge_request
from capeval.engine.judging.runner import run_judging
from capeval.engine.protocols.base import RequestContext
from capeval.engine.protocols.capability.release import load_captions, load_items
from capeval.engine.registry import lookup

MEDIAN_S, SIGMA, IN_FLIGHT = 0.3, 0.8, 64
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "capability"


def capability_requests(n: int, judge: str = "bench-judge", revision: str = "r1"):
    """At least n CAPability requests from the real release (qwen2.5vl_7b captions), strict mode with JSON schemas;
    more judge seeds when one pass over the release is not enough (each seed is a distinct request). The passes of
    seeds 1, 2, ... are the rendered first pass with each seed's number and a key of their own (CAPability's prompts
    do not depend on the seed): rendering ~12k prompts again per seed would only slow the benchmark's setup."""
    import pyarrow as pa
    import pyarrow.compute as pc

    items, captions = _release(load_items, load_captions)
    protocol = lookup("protocol", "capability")
    one = protocol.build_requests(items, captions, judge=judge, judge_revision=revision, structured=True)
    seeds = max(1, math.ceil(n / max(1, one.num_rows)))
    tables = [one]
    for s in range(1, seeds):
        t = one.set_column(one.schema.get_field_index("seed"), one.schema.field("seed"),
                           pa.array([s] * one.num_rows, one["seed"].type))
        t = t.set_column(t.schema.get_field_index("request_key"), one.schema.field("request_key"),
                         pc.binary_join_element_wise(one["request_key"], pa.scalar(f"seed{s}"), "|"))
        tables.append(t)
    return protocol, pa.concat_tables(tables).slice(0, n)


_RELEASE: tuple = ()


def _release(load_items, load_captions):
    """The release's items and qwen2.5vl_7b captions, read once per process (the sections share them)."""
    global _RELEASE
    if not _RELEASE:
        items = load_items(DATA / "annotations")
        _RELEASE = (items, load_captions(DATA / "captions" / "qwen2.5vl_7b", items))
    return _RELEASE


class InstantJudge:
    """An in-process backend with no latency at all: answers each request at once with valid JSON for its schema
    (a category list for classification tasks, a score otherwise)."""

    name, revision = "bench-judge", "r1"

    def stream(self, feed, max_in_flight):
        while True:
            batch = feed.take(max_in_flight)
            if not batch:
                if feed.closed:
                    return
                continue
            for r in batch:
                yield JudgeResponse(r.key, self._text(r), prompt_tokens=len(r.user) // 4, completion_tokens=12)

    @staticmethod
    def _text(r) -> str:
        if r.json_schema and '"pred"' in r.json_schema:
            return '{"pred": ["N/A"], "reason": "instant"}'
        return '{"object_number": "thing: 2", "object_color": "thing: red", "score": 1, "reason": "instant"}'

    def judge(self, requests):
        return [JudgeResponse(r.key, self._text(r), prompt_tokens=len(r.user) // 4, completion_tokens=12)
                for r in requests]

    def close(self) -> None:
        pass


class _Schema:
    def __init__(self, json_schema):
        self.json_schema = json_schema


def overhead(quick: bool = True) -> dict:
    n = 100_000 if quick else 300_000
    protocol, reqs = capability_requests(n)
    with tempfile.TemporaryDirectory(prefix="capeval-bench-") as tmp:
        cpu0, t0 = time.process_time(), time.perf_counter()
        verdicts, summary = run_judging(reqs, InstantJudge(), cache_dir=tmp, protocol=protocol, max_in_flight=256,
                                        progress=False, return_summary=True)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    assert verdicts.num_rows == n, (verdicts.num_rows, n)
    # The protocol's own parser runs inside that time: measured alone on a sample, reported beside it.
    sample = reqs.slice(0, 5000).to_pylist()
    texts = [InstantJudge._text(_Schema(r["json_schema"])) for r in sample]
    p0 = time.process_time()
    for r, t in zip(sample, texts):
        protocol.parse(r, t)
    parse_ms = 1000 * (time.process_time() - p0) / len(sample)
    per_request = 1000 * cpu / summary.sent
    return {
        "requests": n,
        "sent": summary.sent,
        "engine_cpu_ms_per_request": round(per_request, 4),
        "protocol_parse_ms_per_request": round(parse_ms, 4),
        "engine_cpu_ms_excluding_parse": round(per_request - parse_ms, 4),
        "wall_ms_per_request": round(1000 * wall / summary.sent, 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "target_ms": ENGINE_CPU.bound,
    }


def scale_requests(n: int):
    """n CAPability requests with short texts (40-character prompts, no caption copy in the context) and distinct
    keys, tiled from the release's ~12k: what the engine does per request is unchanged, the input table stays small
    enough that the engine's own memory shows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    protocol, base = capability_requests(12_000)
    ctx = [replace(RequestContext.decode(c), fields={}).encode() for c in base["context"].to_pylist()]
    base = base.set_column(base.schema.get_field_index("context"), "context", pa.array(ctx, pa.string()))
    base = base.set_column(base.schema.get_field_index("user"), "user",
                           pc.utf8_slice_codeunits(base["user"], 0, 40))
    base = base.set_column(base.schema.get_field_index("system"), "system", pa.nulls(base.num_rows, pa.string()))
    idx = np.arange(n) % base.num_rows
    t = base.take(pa.array(idx))
    keys = pc.binary_join_element_wise(t["request_key"], pa.array((np.arange(n) // base.num_rows).astype(str)), "-")
    t = t.set_column(t.schema.get_field_index("request_key"), "request_key", keys)
    return protocol, t


def scale(n: int = 1_000_000, *, batch_rows: int = 65_536) -> dict:
    """`run_judging` over n requests with the instant backend, the requests streamed from a Parquet file in record
    batches of `batch_rows` (what a million-request run does: the request table is never whole in memory): peak RSS
    and CPU per request (linear time: compare with `overhead`). Run it in a fresh process for a clean peak RSS."""
    import subprocess
    import sys

    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory(prefix="capeval-bench-") as tmp:
        # built in a child process: loading the release leaves this process's heap untouched, so the peak RSS
        # below is what the engine needs (the batches it holds, the verdicts it builds). Row groups of batch_rows:
        # Parquet is read a row group at a time, so a file of one huge row group would be read whole.
        path = Path(tmp) / "requests.parquet"
        code = ("import sys, pyarrow.parquet as pq; from capeval.benchmarks.bench_streaming import scale_requests; "
                f"pq.write_table(scale_requests({int(n)})[1], {str(path)!r}, row_group_size={int(batch_rows)})")
        subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
        protocol = lookup("protocol", "capability")
        source = pq.ParquetFile(path)
        input_mb = sum(source.metadata.row_group(i).total_byte_size for i in range(source.num_row_groups)) / 2**20
        rss_before = _status_mb("VmRSS")
        with tempfile.TemporaryDirectory(prefix="capeval-bench-") as cache:
            cpu0, t0 = time.process_time(), time.perf_counter()
            verdicts = run_judging(source.iter_batches(batch_size=batch_rows), InstantJudge(), cache_dir=cache,
                                   protocol=protocol, max_in_flight=256, progress=False)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    assert verdicts.num_rows == n
    return {"requests": n, "input_table_mb_uncompressed": round(input_mb, 1), "batch_rows": batch_rows,
            "rss_before_run_mb": rss_before, "peak_rss_mb": _status_mb("VmHWM"),
            "verdict_table_mb": round(verdicts.nbytes / 2**20, 1),
            "cpu_ms_per_request": round(1000 * cpu / n, 4), "wall_s": round(wall, 1),
            "target_peak_rss_mb": SCALE_RSS.bound}


def _status_mb(field: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _old_barrier_loop(judge, requests, batch: int) -> int:
    """Today's loop before streaming: send a batch, wait for all of it, then the next (cache writes left out, which
    only flatters it)."""
    done = 0
    for start in range(0, len(requests), batch):
        done += len(judge.judge(requests[start : start + batch]))
    return done


def streaming(quick: bool = True) -> dict:
    n = 3000 if quick else 4000  # the size the target is set at (benchmarks/targets.py)
    n_barrier = 320 if quick else 1280  # a rate: 5 rounds of 64 show the barrier's cost
    protocol, reqs = capability_requests(n, judge="loopback", revision="lognormal")
    mean_latency = MEDIAN_S * math.exp(SIGMA**2 / 2)
    cfg = FaultConfig(latency_median_s=MEDIAN_S, latency_sigma=SIGMA, log_attempts=False, lifetime_s=900.0)
    with LoopbackServer(cfg, mode="process") as server:
        judge = OpenAIJudge(model="loopback", base_url=server.base_url, max_in_flight=IN_FLIGHT, timeout_s=60.0)
        streams = isinstance(judge, StreamingJudge)
        if not streams:
            judge.thread_safe = True  # its judge() runs on a private event loop: concurrent calls are safe
        try:
            with tempfile.TemporaryDirectory(prefix="capeval-bench-") as tmp:
                t0 = time.perf_counter()
                verdicts, summary = run_judging(reqs, judge, cache_dir=tmp, protocol=protocol, progress=False,
                                                max_in_flight=IN_FLIGHT, batch_size=1, return_summary=True)
                wall = time.perf_counter() - t0
            barrier_reqs = [to_judge_request(r) for r in reqs.slice(0, n_barrier).to_pylist()]
            barrier_reqs = [type(r)(**{**r.__dict__, "key": f"barrier-{i}", "user": r.user + f"\n#{i}"})
                            for i, r in enumerate(barrier_reqs)]
            t1 = time.perf_counter()
            _old_barrier_loop(judge, barrier_reqs, IN_FLIGHT)
            barrier_wall = time.perf_counter() - t1
        finally:
            judge.close()
    achieved = summary.sent / wall
    bound = IN_FLIGHT / mean_latency
    return {
        "requests": summary.sent,
        "hedged_requests": summary.hedged,  # copies sent into the drain's idle slots, not counted in `requests`
        "errors": summary.errors,
        "achieved_per_s": round(achieved, 1),
        "bound_per_s": round(bound, 1),
        "share": round(achieved / bound, 3),
        "barrier_per_s": round(n_barrier / barrier_wall, 1),
        "barrier_requests": n_barrier,
        "driven_by": "stream()" if streams else "judge() on 64 threads, one request per call",
        "latency": {"median_s": MEDIAN_S, "sigma": SIGMA, "mean_s": round(mean_latency, 3)},
        "in_flight": IN_FLIGHT,
        "target_share": STREAMING_SHARE.bound,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="capeval bench streaming", description=__doc__.split("\n\n")[0])
    # checked below, not with `choices`: argparse (3.11) checks an empty or default list against them as one value
    p.add_argument("which", nargs="*", help="sections to run: overhead, streaming, scale (default: overhead streaming)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--requests", type=int, default=1_000_000, help="for scale")
    args = p.parse_args(argv)
    args.which = args.which or ["overhead", "streaming"]
    unknown = sorted(set(args.which) - {"overhead", "streaming", "scale"})
    if unknown:
        p.error(f"unknown section(s) {unknown}; sections: overhead, streaming, scale")
    out = {name: scale(args.requests) if name == "scale" else globals()[name](args.quick) for name in args.which}
    found = verdicts(STREAMING, out)
    out["targets"] = as_json(found)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for name in args.which:
            print(figures(name, out[name]))
        print(targets_table(found, quick=args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
