"""HTTP/1.1 transports for the OpenAI-compatible backends: one POST -> (status, headers, body), nothing more.

Why not the `openai` SDK's own transport: against an instant local server the SDK (httpx or its aiohttp client)
costs ~1.1-1.5 ms of client CPU per request, a tuned bare aiohttp session ~0.33-0.42 ms, and this module's
`LeanPool` ~0.12-0.14 ms (benchmarks/http_loopback.py; numbers in docs/bench.md). A pool of 8 vLLM servers at
~300 requests/s each is 2,400 requests/s: 3 cores of client with the SDK, a third of one core with `LeanPool`.

`LeanPool` is a keep-alive connection pool on asyncio protocols with the `httptools` response parser (what uvicorn
uses): Content-Length and chunked bodies, `Connection: close`, TLS (certifi's CA bundle when installed), a per-attempt
timeout that drops the connection, and one transparent resend when a pooled connection turned out to be closed by
the server before answering (its keep-alive ran out). `AiohttpPool` is the same interface over aiohttp, used when a
proxy is configured in the environment (it honours HTTP(S)_PROXY / NO_PROXY) or when httptools is missing.
Retries, backoff and error meaning live one level up (adapters/http_chat.py).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import urllib.parse
import urllib.request
from typing import Protocol

TRANSPORTS = ("auto", "lean", "aiohttp")


class TransportTimeout(Exception):
    """No complete response within the attempt's timeout (the connection was dropped)."""


class TransportError(Exception):
    """Could not connect, or the connection broke before a complete response."""


class Transport(Protocol):
    async def post(self, body: bytes, timeout_s: float) -> tuple[int, dict[str, str], bytes]: ...

    async def close(self) -> None: ...


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; at most one request outstanding."""

    def __init__(self, pool: "LeanPool"):
        import httptools

        self.pool = pool
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.future: asyncio.Future | None = None
        self.body: list[bytes] = []
        self.headers: dict[str, str] = {}
        self.got_bytes = False
        self.closed = False
        self.used = 0  # requests completed on this connection

    # asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        try:
            self.parser.feed_data(data)
        except Exception as exc:  # noqa: BLE001 - httptools.HttpParserError and friends: the stream is unusable
            self._fail(TransportError(f"invalid HTTP response: {exc}"))
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._fail(TransportError(f"connection closed by the server{f': {exc}' if exc else ''}"))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        future, self.future = self.future, None
        if future is None or future.done():
            return
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        future.set_result((self.parser.get_status_code(), self.headers, body, self.parser.should_keep_alive()))

    def _fail(self, exc: Exception) -> None:
        future, self.future = self.future, None
        if future is not None and not future.done():
            future.set_exception(exc)

    def send(self, data: bytes) -> asyncio.Future:
        self.future = self.pool.loop.create_future()
        self.body, self.headers, self.got_bytes = [], {}, False
        self.transport.write(data)
        return self.future


class LeanPool:
    """At most `limit` connections to one origin; callers beyond the limit wait for a free connection (FIFO)."""

    def __init__(self, url: str, limit: int, headers: dict[str, str]):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"base_url must be http:// or https://; got {url!r}")
        self.loop = asyncio.get_running_loop()
        self.host = parsed.hostname
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.ssl = _ssl_context() if parsed.scheme == "https" else None
        self.limit = int(limit)
        self.idle: list[_Conn] = []
        self.n_open = 0
        self.waiters: collections.deque[asyncio.Future] = collections.deque()
        host = self.host if parsed.port is None else f"{self.host}:{self.port}"
        lines = [f"POST {parsed.path or '/'} HTTP/1.1", f"Host: {host}"] + [f"{k}: {v}" for k, v in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    async def _acquire(self, connect_timeout_s: float) -> tuple[_Conn, bool]:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and not conn.transport.is_closing():
                return conn, True
            self.n_open -= 1
        if self.n_open >= self.limit:
            waiter = self.loop.create_future()
            self.waiters.append(waiter)
            try:
                conn = await waiter  # handed over by _release; None: a slot to open a new connection
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._release(waiter.result(), keep=waiter.result() is not None)
                raise
            if conn is not None:
                if not conn.closed and not conn.transport.is_closing():
                    return conn, True
                self.n_open -= 1
        self.n_open += 1
        try:
            connect = self.loop.create_connection(lambda: _Conn(self), self.host, self.port, ssl=self.ssl,
                                                  server_hostname=self.host if self.ssl else None)
            _, conn = await asyncio.wait_for(connect, connect_timeout_s)
        except BaseException:
            self.n_open -= 1
            self._wake_one_for_new_slot()
            raise
        return conn, False

    def _wake_one_for_new_slot(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self, conn: _Conn | None, keep: bool) -> None:
        if conn is None:
            return
        if not keep or conn.closed:
            if not conn.closed and conn.transport is not None:
                conn.transport.close()
            self.n_open -= 1
            self._wake_one_for_new_slot()
            return
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self.idle.append(conn)

    async def post(self, body: bytes, timeout_s: float) -> tuple[int, dict[str, str], bytes]:
        data = self._head + str(len(body)).encode() + b"\r\n\r\n" + body
        for _resend in range(2):
            try:  # waiting for a free connection is not timed (it is our queue, not the server)
                conn, reused = await self._acquire(timeout_s)
            except asyncio.TimeoutError:
                raise TransportTimeout(f"could not connect within {timeout_s:g} s") from None
            except OSError as exc:
                raise TransportError(f"cannot connect to {self.host}:{self.port}: {exc}") from None
            future = conn.send(data)
            timer = self.loop.call_later(timeout_s, _expire, future, timeout_s)
            try:
                status, headers, payload, keep_alive = await future
            except TransportError:
                # A pooled connection that the server closed while idle: the request never reached it; send again
                # once on a fresh connection (what every keep-alive client does; it is not a retry of the request).
                stale = reused and not conn.got_bytes
                self._release(conn, keep=False)
                if stale and _resend == 0:
                    continue
                raise
            except BaseException:  # timeout or cancellation: the connection's state is unknown, drop it
                self._release(conn, keep=False)
                raise
            finally:
                timer.cancel()
            conn.used += 1
            self._release(conn, keep=keep_alive)
            return status, headers, payload
        raise TransportError("unreachable")

    async def close(self) -> None:
        for conn in self.idle:
            conn.transport.close()
        self.idle.clear()
        for waiter in self.waiters:
            if not waiter.done():
                waiter.cancel()


def _expire(future: asyncio.Future, timeout_s: float) -> None:
    if not future.done():
        future.set_exception(TransportTimeout(f"no response within {timeout_s:g} s"))


class AiohttpPool:
    """The same interface over an aiohttp session (proxies from the environment, or no httptools)."""

    def __init__(self, url: str, limit: int, headers: dict[str, str]):
        import aiohttp

        self.url = url
        self.headers = headers
        # The proxy is looked up once here: aiohttp's trust_env looks it up again for every request.
        self.proxy = proxy_for(url)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=int(limit), ssl=_ssl_context() if url.startswith("https") else None),
            cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=("User-Agent",))
        self._timeouts: dict[float, object] = {}

    async def post(self, body: bytes, timeout_s: float) -> tuple[int, dict[str, str], bytes]:
        import aiohttp

        timeout = self._timeouts.get(timeout_s)
        if timeout is None:
            timeout = self._timeouts[timeout_s] = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self.session.post(self.url, data=body, headers=self.headers, timeout=timeout,
                                         proxy=self.proxy) as resp:
                payload = await resp.read()
                return resp.status, _LowerHeaders(resp.headers), payload
        except asyncio.TimeoutError:
            raise TransportTimeout(f"no response within {timeout_s:g} s") from None
        except aiohttp.ClientError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from None

    async def close(self) -> None:
        await self.session.close()


class _LowerHeaders:
    """`get(name)` on aiohttp's case-insensitive headers with lower-case names, without copying them."""

    __slots__ = ("_headers",)

    def __init__(self, headers):
        self._headers = headers

    def get(self, name: str, default=None):
        return self._headers.get(name, default)


def _ssl_context() -> ssl.SSLContext:
    try:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    except ImportError:
        return ssl.create_default_context()


def proxy_for(url: str) -> str | None:
    """The proxy the environment routes `url` through (HTTP(S)_PROXY / ALL_PROXY, minus NO_PROXY), or None."""
    parsed = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parsed.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parsed.hostname or ""):
        return None
    return proxy


def uses_proxy(url: str) -> bool:
    return proxy_for(url) is not None


def choose_transport(url: str, kind: str = "auto") -> str:
    """"lean" unless a proxy applies to `url` or httptools is missing ("aiohttp"); an explicit kind is kept."""
    if kind not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}; got {kind!r}")
    if kind != "auto":
        return kind
    try:
        import httptools  # noqa: F401
    except ImportError:
        return "aiohttp"
    return "aiohttp" if uses_proxy(url) else "lean"


def make_transport(url: str, limit: int, headers: dict[str, str], kind: str = "auto") -> Transport:
    """Call from the event loop that will use it."""
    chosen = choose_transport(url, kind)
    return LeanPool(url, limit, headers) if chosen == "lean" else AiohttpPool(url, limit, headers)
