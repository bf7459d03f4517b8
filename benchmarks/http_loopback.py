"""Client CPU of the OpenAI-compatible judge against the instant loopback server (in its own process).

`measure_http_client(in_flight, n_requests)` is what `capeval bench judge` reports as "http": `n_requests` distinct
judge requests through `OpenAIJudge.stream` (the streaming judge loop's path; `mode="batch"` uses `judge()`), and
the client process's CPU time per request (`time.process_time`, all threads: body building, event loop, parsing).
The server runs in another process, so its work is not counted. Same-process baselines over the same requests:
`measure_sdk` (the `openai` package's AsyncOpenAI: typed `chat.completions.create`, and its raw `post` that skips
the typed layer) and `measure_raw_aiohttp` (a tuned bare aiohttp session, no retries, msgspec JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from capeval.adapters.base import JudgeRequest, ListFeed
from capeval.adapters.http_chat import decode_body, encode_body
from capeval.adapters.openai_http import OpenAIJudge
from capeval.benchmarks.loopback_server import FaultConfig, LoopbackServer

TARGET_CPU_MS = 0.35


def _requests(n: int) -> list[JudgeRequest]:
    return [JudgeRequest(key=f"k{i}", user=f"Caption: a dog runs.\nQuestion {i}: is there a dog?",
                         choices=("yes", "no"), max_tokens=4, seed=i) for i in range(n)]


def measure_http_client(in_flight: int = 256, n_requests: int = 5000, structured: str = "vllm", mode: str = "stream",
                        transport: str = "auto") -> dict:
    reqs = _requests(n_requests + 300)
    warm, reqs = reqs[:300], reqs[300:]
    with LoopbackServer(FaultConfig(log_attempts=False), mode="process") as server:
        with OpenAIJudge(model="loopback", base_url=server.base_url, api_key="EMPTY", structured=structured,
                         max_in_flight=in_flight, timeout_s=30.0, transport=transport) as judge:
            judge.judge(warm)  # connections, imports
            t0, c0 = time.perf_counter(), time.process_time()
            out = list(judge.stream(ListFeed(reqs), in_flight)) if mode == "stream" else judge.judge(reqs)
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
            chosen = type(judge._runner._transport).__name__
    errors = sum(r.text is None for r in out)
    return {"client_cpu_ms_per_request": round(1000 * cpu / n_requests, 4), "target_ms": TARGET_CPU_MS,
            "requests_per_s": round(n_requests / elapsed, 1), "in_flight": in_flight, "n_requests": n_requests,
            "errors": errors, "mode": mode, "transport": chosen,
            # on a shared machine wall-clock rates measure the neighbours; 1 / CPU per request is what one
            # dedicated core would reach
            "requests_per_client_cpu_s": round(n_requests / cpu, 1) if cpu > 0 else None}


def measure_sdk(in_flight: int = 256, n_requests: int = 2000, typed: bool = True, tuned: bool = True) -> dict:
    """Baseline: the openai SDK (AsyncOpenAI, retries off, a semaphore). `tuned`: its aiohttp client with a pool as
    large as the window on uvloop (capeval's previous path); else its default httpx client on asyncio."""
    from openai import AsyncOpenAI

    reqs = _requests(n_requests + 200)

    async def run(base_url: str) -> tuple[float, float, int]:
        http_client = None
        if tuned:
            import httpx2
            from openai import DefaultAioHttpClient

            http_client = DefaultAioHttpClient(limits=httpx2.Limits(max_connections=in_flight,
                                                                    max_keepalive_connections=in_flight), timeout=30.0)
        client = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=30.0, http_client=http_client)
        sem = asyncio.Semaphore(in_flight)
        errors = 0

        async def one(r):
            nonlocal errors
            body = {"model": "loopback", "messages": [{"role": "user", "content": r.user}], "max_tokens": 4,
                    "seed": r.seed, "temperature": 0.0}
            async with sem:
                if typed:
                    resp = await client.chat.completions.create(**body, extra_body={
                        "structured_outputs": {"choice": list(r.choices)}})
                    errors += not resp.choices[0].message.content
                else:
                    resp = await client.post("/chat/completions", body={
                        **body, "structured_outputs": {"choice": list(r.choices)}}, cast_to=object)
                    errors += not resp["choices"][0]["message"]["content"]

        await asyncio.gather(*(one(r) for r in reqs[:200]))
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(one(r) for r in reqs[200:]))
        out = time.perf_counter() - t0, time.process_time() - c0, errors
        await client.close()
        return out

    with LoopbackServer(FaultConfig(log_attempts=False), mode="process") as server:
        if tuned:
            import uvloop

            elapsed, cpu, errors = uvloop.run(run(server.base_url))
        else:
            elapsed, cpu, errors = asyncio.run(run(server.base_url))
    path = "chat.completions.create (typed)" if typed else "client.post(cast_to=object) (untyped)"
    client = "DefaultAioHttpClient, pool = window, uvloop" if tuned else "default httpx client, asyncio loop"
    return {"client_cpu_ms_per_request": round(1000 * cpu / n_requests, 4),
            "requests_per_s": round(n_requests / elapsed, 1), "n_requests": n_requests, "errors": errors,
            "path": f"{path}; {client}"}


def measure_raw_aiohttp(in_flight: int = 256, n_requests: int = 5000) -> dict:
    """Baseline: the same POSTs with a tuned bare aiohttp session (no retries, no error mapping)."""
    import aiohttp

    bodies = [encode_body({"model": "loopback", "messages": [{"role": "user", "content": r.user}], "max_tokens": 4,
                           "seed": r.seed, "temperature": 0.0, "structured_outputs": {"choice": ["yes", "no"]}})
              for r in _requests(n_requests + 200)]

    async def run(url: str) -> tuple[float, float, int]:
        sem = asyncio.Semaphore(in_flight)
        errors = 0
        headers = {"Content-Type": "application/json", "Authorization": "Bearer EMPTY"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=in_flight),
                                         cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False) as session:
            async def one(body):
                nonlocal errors
                async with sem:
                    async with session.post(url, data=body, headers=headers) as resp:
                        data = decode_body(await resp.read())
                        errors += resp.status != 200 or not data.get("choices")

            await asyncio.gather(*(one(b) for b in bodies[:200]))
            t0, c0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(one(b) for b in bodies[200:]))
            return time.perf_counter() - t0, time.process_time() - c0, errors

    with LoopbackServer(FaultConfig(log_attempts=False), mode="process") as server:
        elapsed, cpu, errors = asyncio.run(run(server.base_url + "/chat/completions"))
    return {"client_cpu_ms_per_request": round(1000 * cpu / n_requests, 4),
            "requests_per_s": round(n_requests / elapsed, 1), "n_requests": n_requests, "errors": errors}


def compare(in_flight: int = 256, n_requests: int = 5000, quick: bool = False) -> dict:
    """Ours (stream and batch, on the aiohttp transport) and the baselines, one after another."""
    n_sdk = max(500, n_requests // 5) if quick else n_requests
    return {
        "capeval_stream": measure_http_client(in_flight, n_requests, mode="stream"),
        "capeval_batch": measure_http_client(in_flight, n_requests, mode="batch"),
        "raw_aiohttp_baseline": measure_raw_aiohttp(in_flight, n_requests),
        "openai_sdk_tuned_untyped_post": measure_sdk(in_flight, n_sdk, typed=False, tuned=True),
        "openai_sdk_tuned_typed": measure_sdk(in_flight, n_sdk, typed=True, tuned=True),
        "openai_sdk_default_typed": measure_sdk(in_flight, max(200, n_sdk // 4), typed=True, tuned=False),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--n-requests", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="fewer requests for the slow SDK baselines")
    args = parser.parse_args(argv)
    result = compare(args.in_flight, args.n_requests, args.quick)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
