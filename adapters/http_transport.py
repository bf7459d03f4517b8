"""The HTTP transport of the OpenAI-compatible backends: one POST -> (status, headers, body), over aiohttp.

aiohttp is a kept library: it reads every framing a server may use (Content-Length, chunked, a body delimited by
closing the connection, gzip/deflate) and speaks to proxies (HTTP(S)_PROXY / NO_PROXY, looked up once per pool). The
hand-written HTTP/1.1 client that was here saved ~0.3 ms of client CPU per request but refused valid replies whose
body ends with the connection; a judge is limited by its server, not by that (docs/bench.md). The conformance suite
(tests/adapters/test_http_conformance.py) holds this transport to real loopback servers that frame replies every
such way, reset connections mid-reply and stall.

Reply size: a body is read in chunks (decompressed, as aiohttp inflates gzip/deflate/br in bounded pieces) and
reading stops as soon as it passes `max_body_bytes` (ReplyTooLarge): a 300 MB reply, or a small gzip body that
inflates to 300 MB, never sits in memory whole (tests/adapters/test_http_reply_cap.py measures peak RSS).

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


class ReplyTooLarge(TransportError):
    """The response body (decompressed) passed the byte cap; reading stopped there and the connection was dropped."""

    def __init__(self, status: int, limit: int, declared: int | None = None):
        what = f"declares {declared:,} bytes" if declared is not None else f"passed {limit:,} bytes"
        super().__init__(f"HTTP {status} reply too large: its body {what} (max_reply_bytes {limit:,}); "
                         "not read further")
        self.status, self.limit = status, limit


#: bytes of one response body (after decompression) read at most: far above any chat completion a protocol asks
#: for (the judge loop refuses replies over 1,000,000 characters anyway), far below what hurts a process's memory
MAX_BODY_BYTES = 16 * 2**20
_READ_CHUNK = 2**16


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

    def __init__(self, url: str, limit: int, headers: dict[str, str], connect_timeout_s: float = 10.0,
                 max_body_bytes: int = MAX_BODY_BYTES):
        import aiohttp

        check_url(url)
        self.url, self.headers = url, headers
        self.connect_timeout_s = float(connect_timeout_s)
        self.max_body_bytes = int(max_body_bytes)
        self.proxy = proxy_for(url)  # aiohttp's trust_env would look it up again for every request
        self._slots = asyncio.Semaphore(int(limit))
        # The headers are the session's defaults, so a request merges none of its own; they name the User-Agent
        # (aiohttp adds its own only when none is set: skipping it per request would cost a header copy each time).
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=int(limit), ssl=_ssl_context() if url.startswith("https") else None),
            cookie_jar=aiohttp.DummyCookieJar(), headers=headers)
        self._timeouts: dict[float, object] = {}

    def _timeout(self, timeout_s: float):
        import aiohttp

        timeout = self._timeouts.get(timeout_s)
        if timeout is None:
            timeout = self._timeouts[timeout_s] = aiohttp.ClientTimeout(
                total=timeout_s, sock_connect=min(self.connect_timeout_s, timeout_s))
        return timeout

    async def post(self, body: bytes, timeout_s: float) -> tuple[int, "_LowerHeaders", bytes]:
        return await self._request("POST", self.url, body, timeout_s)

    async def get(self, url: str, timeout_s: float) -> tuple[int, "_LowerHeaders", bytes]:
        """A GET of `url` (another path of the same server, e.g. its /models) with the pool's headers and rules."""
        return await self._request("GET", url, None, timeout_s)

    async def _request(self, method: str, url: str, body: bytes | None,
                       timeout_s: float) -> tuple[int, "_LowerHeaders", bytes]:
        import aiohttp

        async with self._slots:  # the wait for a slot is not part of the attempt's timeout
            try:
                async with self.session.request(method, url, data=body, timeout=self._timeout(timeout_s),
                                                proxy=self.proxy) as resp:
                    payload = await self._read_capped(resp)
                    return resp.status, _LowerHeaders(resp.headers), payload
            except asyncio.TimeoutError as exc:  # aiohttp's timeout errors are asyncio.TimeoutError too
                what = "could not connect" if isinstance(exc, aiohttp.ConnectionTimeoutError) else "no response"
                limit = self.connect_timeout_s if what == "could not connect" else timeout_s
                raise TransportTimeout(f"{what} within {limit:g} s") from None
            except aiohttp.ClientError as exc:  # refused, reset, closed mid-body, malformed, bad gzip
                raise TransportError(f"{type(exc).__name__}: {exc}"[:300]) from None
            except OSError as exc:
                raise TransportError(f"{type(exc).__name__}: {exc}"[:300]) from None

    async def _read_capped(self, resp) -> bytes:
        """The body, read chunk by chunk; ReplyTooLarge as soon as it passes the cap (leaving the `async with`
        unread drops the connection instead of draining the rest)."""
        limit = self.max_body_bytes
        declared = resp.content_length  # of the encoded body: a cap on it holds only for an identity body
        if declared is not None and declared > limit and not resp.headers.get("Content-Encoding"):
            raise ReplyTooLarge(resp.status, limit, declared)
        if declared is not None and not resp.headers.get("Content-Encoding"):
            return await resp.read()  # an identity body of a declared length within the cap: read as it is framed
        body = bytearray()
        async for chunk in resp.content.iter_chunked(_READ_CHUNK):
            body += chunk
            if len(body) > limit:
                raise ReplyTooLarge(resp.status, limit)
        return bytes(body)

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


def preload_transport() -> None:
    """Import aiohttp (deferred by this module: importing a backend must stay light), e.g. on a runner's thread while
    its owner starts up, so that the first request does not pay for it."""
    import aiohttp  # noqa: F401


def make_transport(url: str, limit: int, headers: dict[str, str], kind: str = "auto",
                   connect_timeout_s: float = 10.0, max_body_bytes: int = MAX_BODY_BYTES) -> AiohttpPool:
    """Call from the event loop that will use it."""
    check_transport(kind)
    return AiohttpPool(url, limit, headers, connect_timeout_s, max_body_bytes)
