"""Throughput of the OpenAI HTTP judge client against the instant loopback server (in its own process).

`measure_http_client(in_flight, n_requests)` is what `capeval bench judge` calls: it sends `n_requests` distinct judge
requests through `OpenAIJudge` (one client, `in_flight` requests in flight) and reports requests per second. The
same-process baseline (`raw_aiohttp`) sends the same requests with bare aiohttp, showing the client's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from adapters.base import JudgeRequest
from benchmarks.loopback_server import FaultConfig, LoopbackServer


def _requests(n: int) -> list[JudgeRequest]:
    return [JudgeRequest(key=f"k{i}", user=f"Caption: a dog runs.\nQuestion {i}: is there a dog?",
                         choices=("yes", "no"), max_tokens=4, seed=i) for i in range(n)]


def measure_http_client(in_flight: int = 64, n_requests: int = 5000, structured: str = "vllm") -> dict:
    from adapters.openai_http import OpenAIJudge

    reqs = _requests(n_requests)
    with LoopbackServer(FaultConfig(log_attempts=False), mode="process") as server:
        with OpenAIJudge(model="loopback", base_url=server.base_url, api_key="EMPTY", structured=structured,
                         max_in_flight=in_flight, timeout_s=30.0) as judge:
            judge.judge(reqs[: min(200, n_requests)])  # warm-up: connections, imports, pydantic models
            t0, c0 = time.perf_counter(), time.process_time()
            out = judge.judge(reqs)
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        stats = server.stats()
    errors = sum(r.text is None for r in out)
    return {"requests_per_s": round(n_requests / elapsed, 1), "in_flight": in_flight, "n_requests": n_requests,
            "errors": errors, "elapsed_s": round(elapsed, 3), "server_max_in_flight": stats["max_in_flight"],
            # client CPU per request: on a shared machine, 1 / this is the rate one dedicated core would reach
            "client_cpu_ms_per_request": round(1000 * cpu / n_requests, 3),
            "requests_per_client_cpu_s": round(n_requests / cpu, 1) if cpu > 0 else None}


def measure_raw_aiohttp(in_flight: int = 64, n_requests: int = 5000) -> dict:
    """Baseline: the same POSTs with bare aiohttp (no SDK, no retries, no pydantic)."""
    import aiohttp

    bodies = [json.dumps({"model": "loopback", "messages": [{"role": "user", "content": r.user}],
                          "max_tokens": 4, "structured_outputs": {"choice": ["yes", "no"]}}) for r in _requests(n_requests)]

    async def run(url: str) -> tuple[float, int]:
        sem = asyncio.Semaphore(in_flight)
        errors = 0
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=in_flight)) as session:
            async def one(body):
                nonlocal errors
                async with sem:
                    async with session.post(url, data=body, headers={"content-type": "application/json"}) as resp:
                        data = await resp.json()
                        errors += resp.status != 200 or not data.get("choices")

            await asyncio.gather(*(one(b) for b in bodies[:200]))
            t0 = time.perf_counter()
            await asyncio.gather(*(one(b) for b in bodies))
            return time.perf_counter() - t0, errors

    with LoopbackServer(FaultConfig(log_attempts=False), mode="process") as server:
        elapsed, errors = asyncio.run(run(server.base_url + "/chat/completions"))
    return {"requests_per_s": round(n_requests / elapsed, 1), "in_flight": in_flight, "n_requests": n_requests,
            "errors": errors - 0, "elapsed_s": round(elapsed, 3)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--n-requests", type=int, default=5000)
    args = parser.parse_args(argv)
    result = {"openai_judge": measure_http_client(args.in_flight, args.n_requests),
              "raw_aiohttp": measure_raw_aiohttp(args.in_flight, args.n_requests)}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
