"""A tiny OpenAI-compatible server on 127.0.0.1 that answers instantly and can inject faults.

Serves POST /v1/chat/completions, GET /health and GET /stats (counts, max requests in flight, the time-weighted
mean in flight between the first arrival and the last departure, attempt log).
Answers are deterministic: a `structured_outputs.choice` / `response_format` enum gets a valid value picked by a
hash of the prompt; a JSON schema gets a minimal valid object; otherwise the last user text is echoed as
"echo:<text>". Faults (429 with Retry-After, 500, a stall longer than the client's timeout, an invalid or truncated
body) hit a seeded fraction of attempts; each request (keyed by its user text) is faulted at most
`max_faults_per_request` times, so a client that retries enough always gets its answer.

Runs in a background thread (`LoopbackServer(mode="thread")`) or in its own process (`mode="process"`, so it does
not share the client's core). Bounded: it stops itself after `lifetime_s`, and a child process exits when its
parent's pipe closes.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field

FAULT_KINDS = ("429", "500", "stall", "garbage")


@dataclass
class FaultConfig:
    rate: float = 0.0  # fraction of attempts faulted
    kinds: tuple[str, ...] = FAULT_KINDS
    retry_after_s: int = 1  # sent as Retry-After on 429
    stall_s: float = 5.0  # longer than the client's timeout
    max_faults_per_request: int = 3
    seed: int = 0
    permanent_400_marker: str = "__BAD_REQUEST__"  # user text containing this always gets a 400
    lifetime_s: float = 600.0
    latency_s: float = 0.0  # delay before each normal answer (lets requests overlap, to observe concurrency)
    # lognormal latency instead (real API and long-generation tails): median latency_median_s, shape latency_sigma
    latency_median_s: float = 0.0
    latency_sigma: float = 0.0
    log_attempts: bool = True  # keep (key, time, outcome) per attempt for /stats; off for benchmarks
    api_key: str | None = None  # when set, any other bearer token gets 401 (status_for_bad_key)
    status_for_bad_key: int = 401
    # cached prompt tokens: "half" reports prompt_tokens // 2 (fixed); "prefix" simulates a prefix cache over
    # 64-character blocks of the rendered messages (a block counts as cached when the same prefix was seen before)
    cache_mode: str = "half"


def _h(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big")


def _user_text(body: dict) -> str:
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):
                return "".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
            return str(c)
    return ""


def _schema_value(schema: dict, h: int):
    if "enum" in schema:
        return schema["enum"][h % len(schema["enum"])]
    t = schema.get("type")
    if t == "object":
        props = schema.get("properties", {})
        return {k: _schema_value(v, _h(h, k)) for k, v in props.items()}
    if t == "integer":
        return int(schema.get("minimum", 0))
    if t == "number":
        return float(schema.get("minimum", 0))
    if t == "boolean":
        return True
    if t == "array":
        return []
    return "ok"


def answer_for(body: dict) -> str:
    text = _user_text(body)
    h = _h(text)
    so = (body.get("structured_outputs") or {})
    if so.get("choice"):
        return so["choice"][h % len(so["choice"])]
    if so.get("json"):
        return json.dumps(_schema_value(so["json"], h))
    rf = body.get("response_format") or {}
    if rf.get("type") == "json_schema":
        return json.dumps(_schema_value(rf["json_schema"]["schema"], h))
    return "echo:" + text


def _prompt_text(body: dict) -> str:
    parts = []
    for m in body.get("messages") or []:
        c = m.get("content")
        if isinstance(c, list):
            parts.extend(p.get("text") or json.dumps(p.get("image_url")) for p in c if isinstance(p, dict))
        else:
            parts.append(str(c))
    return "\x1e".join(parts)


class PrefixCache:
    """Counts prompt characters whose whole prefix was seen before, in 64-character blocks (like vLLM's block
    hashes over tokens; 4 characters stand for one token)."""

    BLOCK = 64

    def __init__(self, max_blocks: int = 1_000_000):
        self.seen: set[int] = set()
        self.max_blocks = max_blocks

    def cached_tokens(self, text: str) -> int:
        h, cached, hit = 0, 0, True
        for start in range(0, len(text) - self.BLOCK + 1, self.BLOCK):
            h = hash((h, text[start : start + self.BLOCK]))
            if hit and h in self.seen:
                cached += self.BLOCK
            else:
                hit = False
                if len(self.seen) < self.max_blocks:
                    self.seen.add(h)
        return cached // 4


def completion_body(body: dict, content: str, cache: PrefixCache | None = None) -> bytes:
    """A chat.completion body. Tokens are characters / 4; a reply longer than `max_tokens` is cut there with
    finish_reason "length"."""
    text = _prompt_text(body) if cache is not None else _user_text(body)
    prompt_tokens = max(1, len(text) // 4)
    cached = cache.cached_tokens(text) if cache is not None else prompt_tokens // 2
    finish = "stop"
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    if isinstance(limit, int) and limit > 0 and len(content) > 4 * limit:
        content, finish = content[: 4 * limit], "length"
    completion_tokens = max(1, len(content) // 4)
    return json.dumps({
        "id": "chatcmpl-loopback", "object": "chat.completion", "created": 0, "model": body.get("model", "loopback"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens,
                  "prompt_tokens_details": {"cached_tokens": min(cached, prompt_tokens)}},
    }).encode()


@dataclass
class _State:
    in_flight: int = 0
    max_in_flight: int = 0
    requests: int = 0  # POSTs to /chat/completions
    model_lists: int = 0  # GETs of /models (a client asking whether its key is accepted)
    outcomes: dict = field(default_factory=dict)  # outcome -> count
    faults_by_key: dict = field(default_factory=dict)
    attempts: list = field(default_factory=list)  # [key, arrival time (monotonic s), outcome]
    # digest of each distinct request body -> its first arrival: a hedge copy or a retry sends the same bytes again,
    # while requests that share their text (every caption request of a workload asks the same prompt) differ in
    # their images
    first_arrivals: dict = field(default_factory=dict)
    # occupancy: the integral of in_flight over time (request-seconds) from the first arrival to the last departure,
    # so mean in flight = in_flight_s / (last_change - first_arrival): by Little's law, what the server could serve
    first_arrival: float | None = None
    last_change: float | None = None
    in_flight_s: float = 0.0

    def moved(self, delta: int) -> None:
        """in_flight changes by delta now: the time since the last change is added at the old count."""
        now = time.monotonic()
        if self.first_arrival is None:
            self.first_arrival = now
        if self.last_change is not None:
            self.in_flight_s += self.in_flight * (now - self.last_change)
        self.last_change = now
        self.in_flight += delta

    def occupancy(self) -> dict:
        span = (self.last_change - self.first_arrival) if self.first_arrival is not None else 0.0
        # the span's ends on the host's monotonic clock (time.monotonic in any process): a client can tell its
        # start-up before the first request and its finish after the last answer apart from the span
        return {"first_arrival": self.first_arrival, "last_change": self.last_change,
                "busy_span_s": round(span, 4), "in_flight_s": round(self.in_flight_s, 4),
                "mean_in_flight": round(self.in_flight_s / span, 3) if span > 0 else 0.0}


def make_app(cfg: FaultConfig):
    from aiohttp import web

    state = _State()
    rng = random.Random(cfg.seed)  # one stream, consumed in arrival order: deterministic for a serial client
    latency_rng = random.Random(cfg.seed + 1)
    lock = threading.Lock()
    prefix_cache = PrefixCache() if cfg.cache_mode == "prefix" else None
    if cfg.cache_mode not in ("half", "prefix"):
        raise ValueError(f"cache_mode must be 'half' or 'prefix'; got {cfg.cache_mode!r}")
    expected_auth = f"Bearer {cfg.api_key}" if cfg.api_key is not None else None

    def pick_fault(key: str) -> str | None:
        with lock:
            if cfg.rate <= 0 or state.faults_by_key.get(key, 0) >= cfg.max_faults_per_request:
                return None
            if rng.random() >= cfg.rate:
                return None
            state.faults_by_key[key] = state.faults_by_key.get(key, 0) + 1
            return rng.choice(cfg.kinds)

    async def chat(request: web.Request):
        state.moved(+1)
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        state.requests += 1
        outcome = "ok"
        key = ""
        t_arrival = time.monotonic()
        try:
            raw = await request.read()
            if cfg.log_attempts:
                state.first_arrivals.setdefault(hashlib.blake2b(raw, digest_size=16).digest(), t_arrival)
            if expected_auth is not None and request.headers.get("Authorization") != expected_auth:
                outcome = str(cfg.status_for_bad_key)
                return web.json_response({"error": {"message": "Incorrect API key provided (loopback)",
                                                    "code": "invalid_api_key"}}, status=cfg.status_for_bad_key)
            try:
                body = json.loads(raw)
                key = _user_text(body)
            except ValueError:
                outcome = "400"
                return web.json_response({"error": {"message": "invalid JSON"}}, status=400)
            if cfg.permanent_400_marker in key:
                outcome = "400"
                return web.json_response({"error": {"message": "bad request (injected)"}}, status=400)
            fault = pick_fault(key)
            if fault is not None:
                outcome = fault
            if fault == "429":
                return web.json_response({"error": {"message": "rate limited (injected)"}}, status=429,
                                         headers={"Retry-After": str(cfg.retry_after_s)})
            if fault == "500":
                return web.json_response({"error": {"message": "internal error (injected)"}}, status=500)
            if fault == "stall":
                deadline = time.monotonic() + cfg.stall_s
                while time.monotonic() < deadline:  # stop early once the client hung up, so in-flight stays honest
                    if request.transport is None or request.transport.is_closing():
                        break
                    await asyncio.sleep(0.02)
                return web.json_response({"error": {"message": "stalled (injected)"}}, status=504)
            if fault == "garbage":
                if _h(cfg.seed, key, state.faults_by_key.get(key)) % 2:
                    return web.Response(body=b'{"id": "chatcmpl-x", "choices": [{"mess', content_type="application/json")
                return web.Response(body=b"<html>not json</html>", content_type="application/json")
            if cfg.latency_median_s > 0:
                await asyncio.sleep(cfg.latency_median_s * math.exp(cfg.latency_sigma * latency_rng.gauss(0, 1)))
            elif cfg.latency_s > 0:
                await asyncio.sleep(cfg.latency_s)
            return web.Response(body=completion_body(body, answer_for(body), prefix_cache),
                                content_type="application/json")
        except asyncio.CancelledError:  # the client hung up (handler_cancellation): no longer in flight here
            if outcome == "ok":  # an injected fault (a stall the client gave up on) keeps its name
                outcome = "cancelled"
            raise
        finally:
            state.moved(-1)
            state.outcomes[outcome] = state.outcomes.get(outcome, 0) + 1
            if cfg.log_attempts:
                state.attempts.append([key, t_arrival, outcome])

    async def models(request: web.Request):
        state.model_lists += 1
        if expected_auth is not None and request.headers.get("Authorization") != expected_auth:
            return web.json_response({"error": {"message": "Incorrect API key provided (loopback)",
                                                "code": "invalid_api_key"}}, status=cfg.status_for_bad_key)
        return web.json_response({"object": "list", "data": [{"id": "loopback", "object": "model"}]})

    async def health(_request):
        return web.json_response({"status": "ok"})

    async def stats(_request):
        return web.json_response({"requests": state.requests, "model_lists": state.model_lists,
                                  "max_in_flight": state.max_in_flight,
                                  "in_flight": state.in_flight, **state.occupancy(), "outcomes": state.outcomes,
                                  "attempts": state.attempts, "first_arrivals": sorted(state.first_arrivals.values()),
                                  "config": asdict(cfg)})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/stats", stats)
    return app


async def _serve(cfg: FaultConfig, port: int, ready, stop: asyncio.Event) -> None:
    from aiohttp import web

    # a request whose client hung up stops at once, as a vLLM server aborts it: in-flight counts stay honest when a
    # client cancels a request (a hedge copy that lost, a timed-out attempt)
    runner = web.AppRunner(make_app(cfg), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    ready(site._server.sockets[0].getsockname()[1])
    try:
        await asyncio.wait_for(stop.wait(), timeout=cfg.lifetime_s)
    except asyncio.TimeoutError:
        pass
    finally:
        await runner.cleanup()


class LoopbackServer:
    """Context manager: `with LoopbackServer(FaultConfig(rate=0.3)) as s: s.base_url` ("http://127.0.0.1:P/v1")."""

    def __init__(self, faults: FaultConfig | None = None, mode: str = "thread"):
        if mode not in ("thread", "process"):
            raise ValueError(f"mode must be 'thread' or 'process'; got {mode!r}")
        self.faults = faults or FaultConfig()
        self.mode = mode
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "LoopbackServer":
        if self.mode == "process":
            cmd = [sys.executable, "-m", "capeval.benchmarks.loopback_server", "--config", json.dumps(asdict(self.faults))]
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=root, text=True)
            line = self._proc.stdout.readline()
            if not line.startswith("PORT "):
                self.stop()
                raise RuntimeError(f"loopback server failed to start (got {line!r})")
            self.port = int(line.split()[1])
            return self
        got = threading.Event()

        def ready(port):
            self.port = port
            got.set()

        def main():
            self._loop = asyncio.new_event_loop()
            self._stop = asyncio.Event()
            self._loop.run_until_complete(_serve(self.faults, 0, ready, self._stop))
            self._loop.close()

        self._thread = threading.Thread(target=main, name="loopback-server", daemon=True)
        self._thread.start()
        if not got.wait(30):
            raise RuntimeError("loopback server did not start within 30 s")
        return self

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=30) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.stdin.close()  # the child exits when its stdin closes
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
            self._proc = None
        if self._thread is not None and self._loop is not None:
            if not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> "LoopbackServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="{}", help="FaultConfig as JSON")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    raw = json.loads(args.config)
    raw["kinds"] = tuple(raw.get("kinds", FAULT_KINDS))
    cfg = FaultConfig(**raw)

    async def run():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def ready(port):
            print(f"PORT {port}", flush=True)

        def watch_parent():  # EOF on stdin: the parent is gone or asked us to stop
            sys.stdin.read()
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=watch_parent, daemon=True).start()
        await _serve(cfg, args.port, ready, stop)

    try:
        import uvloop  # noqa: F401 - faster when present

        uvloop.run(run())
    except ImportError:
        asyncio.run(run())


if __name__ == "__main__":
    main()
