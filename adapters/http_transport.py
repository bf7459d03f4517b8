"""The HTTP transport of the OpenAI-compatible backends: one POST -> (status, headers, body), over aiohttp.

aiohttp is a kept library: it reads every framing a server may use (Content-Length, chunked, a body delimited by
closing the connection, gzip/deflate) and speaks to proxies (HTTP(S)_PROXY / NO_PROXY, looked up once per pool). The
hand-written HTTP/1.1 client that was here saved ~0.3 ms of client CPU per request but refused valid replies whose
body ends with the connection; a judge is limited by its server, not by that (docs/bench.md). The conformance suite
(tests/adapters/test_http_conformance.py) holds this transport to real loopback servers that frame replies every
such way, reset connections mid-reply and stall.

Timeouts: `timeout_s` bounds one attempt from the moment it has a connection slot (connect, send, wait, read);
waiting for a free slot is our own queue, not the server, so it is not timed (else requests queued behind slow ones
time out without ever being sent). `connect_timeout_s` bounds opening a TCP (and TLS) connection. Retries, backoff
and error meaning live one level up (adapters/http_chat.py).
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
import urllib.request

#: the `transport` option's values; both mean aiohttp ("auto" is kept so sweep files that name it still run)
TRANSPORTS = ("auto", "aiohttp")


class TransportTimeout(Exception):
    """No complete response within the attempt's timeout (or no connection within the connect timeout)."""


class TransportError(Exception):
    """Could not connect, or the connection broke before a complete response."""


def check_url(url: str) -> None:
    """ValueError unless `url` is an http:// or https:// URL with a host."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"base_url must be an http:// or https:// URL with a host; got {url!r}")


def check_transport(kind: str) -> None:
    if kind == "lean":
        raise ValueError("transport 'lean' was removed (it refused valid replies whose body ends with the "
                         "connection); leave transport unset or use 'aiohttp'")
    if kind not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}; got {kind!r}")


class AiohttpPool:
    """At most `limit` requests (and connections) to one URL at a time; callers beyond it wait, untimed, FIFO.
    Construct and use it on one event loop."""

    def __init__(self, url: str, limit: int, headers: dict[str, str], connect_timeout_s: float = 10.0):
        import aiohttp

        check_url(url)
        self.url, self.headers = url, headers
        self.connect_timeout_s = float(connect_timeout_s)
        self.proxy = proxy_for(url)  # aiohttp's trust_env would look it up again for every request
        self._slots = asyncio.Semaphore(int(limit))
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=int(limit), ssl=_ssl_context() if url.startswith("https") else None),
            cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=("User-Agent",))
        self._timeouts: dict[float, object] = {}

    def _timeout(self, timeout_s: float):
        import aiohttp

        timeout = self._timeouts.get(timeout_s)
        if timeout is None:
            timeout = self._timeouts[timeout_s] = aiohttp.ClientTimeout(
                total=timeout_s, sock_connect=min(self.connect_timeout_s, timeout_s))
        return timeout

    async def post(self, body: bytes, timeout_s: float) -> tuple[int, "_LowerHeaders", bytes]:
        import aiohttp

        async with self._slots:  # the wait for a slot is not part of the attempt's timeout
            try:
                async with self.session.post(self.url, data=body, headers=self.headers,
                                             timeout=self._timeout(timeout_s), proxy=self.proxy) as resp:
                    payload = await resp.read()
                    return resp.status, _LowerHeaders(resp.headers), payload
            except asyncio.TimeoutError as exc:  # aiohttp's timeout errors are asyncio.TimeoutError too
                what = "could not connect" if isinstance(exc, aiohttp.ConnectionTimeoutError) else "no response"
                limit = self.connect_timeout_s if what == "could not connect" else timeout_s
                raise TransportTimeout(f"{what} within {limit:g} s") from None
            except aiohttp.ClientError as exc:  # refused, reset, closed mid-body, malformed, bad gzip
                raise TransportError(f"{type(exc).__name__}: {exc}"[:300]) from None
            except OSError as exc:
                raise TransportError(f"{type(exc).__name__}: {exc}"[:300]) from None

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


def make_transport(url: str, limit: int, headers: dict[str, str], kind: str = "auto",
                   connect_timeout_s: float = 10.0) -> AiohttpPool:
    """Call from the event loop that will use it."""
    check_transport(kind)
    return AiohttpPool(url, limit, headers, connect_timeout_s)
