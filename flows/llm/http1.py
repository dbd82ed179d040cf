"""HTTP/1.1 keep-alive POSTs to one URL: the transport under the gateway's chat path.

A run sends thousands of chat completions, and on a fast endpoint the client's CPU per request bounds its
throughput. A bare loop of aiohttp posts cost 0.37 ms of CPU per request on loopback, more than the rest of
the gateway; the same loop over this client, asyncio protocols over httptools' parser (llhttp, the parser of
Node.js and uvicorn), costs about 0.14 ms, kernel time included. It does one thing: POST a body to a fixed
URL over http or https, one request per connection at a time, and read the whole answer, framed by
Content-Length, chunked encoding or the close of the connection.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools


class ConnectionFailed(Exception):
    """The connection could not be made, or it broke or closed before the whole answer arrived."""


@dataclass(frozen=True, slots=True)
class Response:
    """A whole answer. Header names are lower-cased; a repeated header's values are joined with ", "."""

    status: int
    headers: dict[str, str]
    content: bytes


class _Connection(asyncio.Protocol):
    """One connection with at most one request in flight (no pipelining)."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[tuple[Response, bool]] | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._headers_done = False
        self.open = False
        self.received = False  # bytes of the current answer arrived: a failure now is not a stale connection

    def send(self, request: bytes) -> asyncio.Future[tuple[Response, bool]]:
        """Write a request; the future gives the answer and whether the connection stays open for another."""
        assert self._transport is not None and self._waiter is None
        self._headers, self._body, self._headers_done, self.received = {}, [], False, False
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return self._waiter

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        self.open = False

    def expire(self) -> None:
        """The request's deadline passed: fail it and drop the connection (an answer may still be coming)."""
        self._fail(TimeoutError())
        self.close()

    # -- asyncio.Protocol ---------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport, self.open = cast(asyncio.Transport, transport), True  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a small request must not wait on Nagle

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(ConnectionFailed(f"malformed HTTP answer ({exc})"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        if self._waiter is None or self._waiter.done():
            return
        if self._headers_done and self._framed_by_close():
            self.on_message_complete()
        else:
            where = "in the middle of the answer" if self.received else "before an answer"
            self._fail(ConnectionFailed(f"the connection closed {where}{f' ({exc})' if exc else ''}"))

    # -- httptools callbacks ------------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        self._headers[key] = f"{self._headers[key]}, {text}" if key in self._headers else text

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        try:
            content = _decoded(b"".join(self._body), self._headers.get("content-encoding"))
        except (zlib.error, ValueError) as exc:
            waiter.set_exception(ConnectionFailed(f"could not decode the answer ({exc})"))
            self.close()
            return
        keep = self.open and self._parser.should_keep_alive()
        waiter.set_result((Response(self._parser.get_status_code(), self._headers, content), keep))

    # -----------------------------------------------------------------------------------------------------

    def _framed_by_close(self) -> bool:
        """An answer with neither a length nor chunks ends where the connection does (RFC 9112 §6.3)."""
        return "content-length" not in self._headers and "chunked" not in self._headers.get("transfer-encoding", "")

    def _fail(self, error: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)


def _decoded(content: bytes, encoding: str | None) -> bytes:
    """Undo a gzip or deflate content coding (requests ask for identity, but a server may compress anyway)."""
    if not encoding or encoding == "identity":
        return content
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompress(content, wbits=zlib.MAX_WBITS | 16)
    if encoding == "deflate":
        try:
            return zlib.decompress(content)
        except zlib.error:  # some servers send deflate without its zlib wrapper
            return zlib.decompress(content, wbits=-zlib.MAX_WBITS)
    raise ValueError(f"unsupported content-encoding {encoding!r}")


class Client:
    """POSTs to one http or https URL over a pool of keep-alive connections: one per request in flight,
    opened on demand; at most ``max_idle`` are kept between requests. The caller bounds the concurrency."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        timeout: float,
        max_idle: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = parts.netloc.rpartition("@")[2]
        fields = {"Host": authority, "Accept-Encoding": "identity", **headers}
        if any(ch in text for item in fields.items() for text in item for ch in "\r\n"):
            raise ValueError("a header name or value holds a line break")
        lines = [f"POST {target} HTTP/1.1", *(f"{name}: {value}" for name, value in fields.items())]
        self._head = ("\r\n".join(lines) + "\r\n").encode()
        self._timeout = timeout
        self._max_idle = max_idle
        self._idle: list[_Connection] = []
        self._busy: dict[_Connection, float] = {}  # connection -> its request's deadline (loop time)
        # One timer per client sweeps the deadlines, instead of a timer armed and cancelled per request.
        self._tick = min(1.0, timeout / 20)
        self._sweeper: asyncio.TimerHandle | None = None

    async def post(self, body: bytes) -> Response:
        """The whole answer, whatever its status. Raises ``ConnectionFailed``, or ``TimeoutError`` when the
        answer has not arrived within the timeout (connecting included; checked every 1/20 of it, at most
        every second)."""
        request = b"%bContent-Length: %d\r\n\r\n%b" % (self._head, len(body), body)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        while True:
            connection = self._take_idle()
            reused = connection is not None
            if connection is None:
                async with asyncio.timeout_at(deadline):
                    connection = await self._connect()
            self._busy[connection] = deadline
            if self._sweeper is None:
                self._sweeper = loop.call_later(self._tick, self._sweep)
            try:
                response, keep = await connection.send(request)
            except ConnectionFailed:
                del self._busy[connection]
                connection.close()
                if reused and not connection.received:
                    continue  # the server had closed this idle connection: the request never reached it
                raise
            except BaseException:  # timed out or cancelled mid-request: the connection is unusable
                del self._busy[connection]
                connection.close()
                raise
            del self._busy[connection]
            if keep and len(self._idle) < self._max_idle:
                self._idle.append(connection)
            else:
                connection.close()
            return response

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for connection in (*self._idle, *self._busy):
            connection.close()
        self._idle.clear()
        self._busy.clear()
        await asyncio.sleep(0)  # let the transports finish closing before the loop might

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for connection, deadline in list(self._busy.items()):
            if deadline <= now:
                connection.expire()
        self._sweeper = loop.call_later(self._tick, self._sweep) if self._busy else None

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            connection = self._idle.pop()
            if connection.open:
                return connection
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(
                _Connection, self._host, self._port, ssl=self._ssl, server_hostname=self._host if self._ssl else None
            )
        except OSError as exc:  # refused, unreachable, DNS, TLS verification (ssl.SSLError is an OSError)
            raise ConnectionFailed(f"could not connect to {self._host}:{self._port} ({exc})") from None
        return connection
