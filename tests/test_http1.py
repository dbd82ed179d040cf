"""The chat path's HTTP/1.1 client against scripted loopback servers, on asyncio's loop and on uvloop:
framing (length, chunks, close), keep-alive reuse and its limits, a stale connection retried once, timeouts,
broken and malformed answers, content codings, TLS, and header injection refused."""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from ifsynth.flows.llm import http1

T = TypeVar("T")
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, T]], T]:
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def run(main: Coroutine[Any, Any, T]) -> T:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)

    return run


@dataclass
class Server:
    """A loopback server that hands each connection to a handler and records what it received."""

    handler: Handler
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    closed_by_client: int = 0
    url: str = ""
    _handlers: list[asyncio.Future[None]] = field(default_factory=list)

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1/chat/completions"
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()
        for task in self._handlers:
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._handlers.append(asyncio.ensure_future(self._handle(reader, writer)))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One request (head and Content-Length body), or None when the client closed the connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.closed_by_client += 1
            return None
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request


def answering(*answers: bytes) -> Handler:
    """Answer each request on a connection with the next of ``answers`` (the last one repeats)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        turn = 0
        while await server.read_request(reader) is not None:
            writer.write(answers[min(turn, len(answers) - 1)])
            await writer.drain()
            turn += 1

    return handler


def ok(body: bytes = b'{"ok":true}', *extra: bytes) -> bytes:
    head = b"".join(line + b"\r\n" for line in extra)
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), head, body)


def client(url: str, **kw: Any) -> http1.Client:
    settings: dict[str, Any] = {"timeout": 5.0, "max_idle": 8, **kw}
    return http1.Client(url, {"Authorization": "Bearer k", "Content-Type": "application/json"}, **settings)


def test_posts_reuse_one_keep_alive_connection(run: Callable[..., Any]) -> None:
    async def go() -> tuple[list[http1.Response], Server]:
        async with Server(answering(ok(b'{"n":1}', b"X-Request-Id: a", b"Set-Cookie: a=1", b"Set-Cookie: b=2"))) as s:
            c = client(s.url)
            answers = [await c.post(b'{"q":%d}' % i) for i in range(3)]
            await c.close()
            return answers, s

    answers, server = run(go())
    assert [a.status for a in answers] == [200, 200, 200]
    assert answers[0].content == b'{"n":1}'
    assert answers[0].headers["x-request-id"] == "a"  # names are lower-cased
    assert answers[0].headers["set-cookie"] == "a=1, b=2"
    assert server.connections == 1 and len(server.requests) == 3
    head, _, body = server.requests[2].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    port = server.url.split(":")[2].split("/")[0]
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
    assert b"Host: 127.0.0.1:" + port.encode() in lines
    assert b"Authorization: Bearer k" in lines and b"Content-Length: 7" in lines
    assert body == b'{"q":2}'


def test_chunked_answer_is_joined(run: Callable[..., Any]) -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"

    async def go() -> tuple[list[bytes], int]:
        async with Server(answering(chunked)) as s:
            c = client(s.url)
            bodies = [(await c.post(b"{}")).content for _ in range(2)]
            await c.close()
            return bodies, s.connections

    bodies, connections = run(go())
    assert bodies == [b"hello world", b"hello world"] and connections == 1


def test_answer_framed_by_close_ends_with_the_connection(run: Callable[..., Any]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b'{"whole":"body"}')
        await writer.drain()
        writer.close()

    async def go() -> tuple[list[bytes], int]:
        async with Server(handler) as s:
            c = client(s.url)
            bodies = [(await c.post(b"{}")).content for _ in range(2)]
            await c.close()
            return bodies, s.connections

    bodies, connections = run(go())
    assert bodies == [b'{"whole":"body"}'] * 2 and connections == 2


def test_connection_close_is_not_reused(run: Callable[..., Any]) -> None:
    async def go() -> int:
        async with Server(answering(ok(b"{}", b"Connection: close"))) as s:
            c = client(s.url)
            for _ in range(3):
                assert (await c.post(b"{}")).status == 200
            await c.close()
            return s.connections

    assert run(go()) == 3


def test_error_statuses_come_back_as_answers(run: Callable[..., Any]) -> None:
    limited = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 2\r\n\r\n{}"

    async def go() -> http1.Response:
        async with Server(answering(limited)) as s:
            c = client(s.url)
            answer = await c.post(b"{}")
            await c.close()
            return answer

    answer = run(go())
    assert answer.status == 429 and answer.headers["retry-after"] == "2"


def test_idle_connection_closed_by_the_server_is_replaced(run: Callable[..., Any]) -> None:
    """The server closes a kept-alive connection as the next request arrives, without answering: the
    request never reached the server, so it goes out once more on a new connection."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(ok())
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # the next request's head: hang up on it

    async def go() -> tuple[list[int], int, int]:
        async with Server(handler) as s:
            c = client(s.url)
            statuses = [(await c.post(b"{}")).status for _ in range(3)]
            await c.close()
            return statuses, s.connections, len(s.requests)

    statuses, connections, answered = run(go())
    assert statuses == [200, 200, 200]
    assert connections == 3 and answered == 3  # each connection answers once; both hang-ups were retried


def test_idle_connection_the_server_closed_earlier_is_skipped(run: Callable[..., Any]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(ok())
        await writer.drain()  # then close at once, as a server's keep-alive timeout would later

    async def go() -> tuple[int, int]:
        async with Server(handler) as s:
            c = client(s.url)
            await c.post(b"{}")
            await asyncio.sleep(0.05)  # the close has arrived before the next request
            await c.post(b"{}")
            await c.close()
            return s.connections, len(s.requests)

    assert run(go()) == (2, 2)


def test_failure_on_a_new_connection_is_not_retried(run: Callable[..., Any]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)  # then hang up without an answer

    async def go() -> tuple[str, int]:
        async with Server(handler) as s:
            c = client(s.url)
            with pytest.raises(http1.ConnectionFailed) as failed:
                await c.post(b"{}")
            await c.close()
            return str(failed.value), s.connections

    reason, connections = run(go())
    assert "closed before an answer" in reason and connections == 1


def test_cut_off_answer_fails(run: Callable[..., Any]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial":')
        await writer.drain()

    async def go() -> str:
        async with Server(handler) as s:
            c = client(s.url)
            with pytest.raises(http1.ConnectionFailed) as failed:
                await c.post(b"{}")
            await c.close()
            return str(failed.value)

    assert "in the middle of the answer" in run(go())


def test_malformed_answer_fails(run: Callable[..., Any]) -> None:
    async def go() -> str:
        async with Server(answering(b"SMTP ready\r\n\r\n")) as s:
            c = client(s.url)
            with pytest.raises(http1.ConnectionFailed) as failed:
                await c.post(b"{}")
            await c.close()
            return str(failed.value)

    assert "malformed HTTP answer" in run(go())


def test_timeout_closes_the_connection(run: Callable[..., Any]) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        await server.read_request(reader)
        await server.read_request(reader)  # no answer; returns when the client hangs up

    async def go() -> tuple[float, int]:
        async with Server(handler) as s:
            c = client(s.url, timeout=0.2)
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await c.post(b"{}")
            waited = time.monotonic() - started
            for _ in range(200):
                if s.closed_by_client:
                    break
                await asyncio.sleep(0.01)
            await c.close()
            return waited, s.closed_by_client

    waited, closed = run(go())
    assert 0.19 <= waited < 2.0, waited  # uvloop's timers have millisecond resolution
    assert closed == 1


def test_cancelled_request_does_not_leave_its_connection_for_reuse(run: Callable[..., Any]) -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader) is not None:
            await asyncio.sleep(0.3)
            writer.write(ok())
            await writer.drain()

    async def go() -> tuple[int, int]:
        async with Server(slow) as s:
            c = client(s.url)
            task = asyncio.ensure_future(c.post(b"{}"))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await c.post(b"{}")).status == 200
            await c.close()
            return s.connections, len(s.requests)

    assert run(go()) == (2, 2)


def test_refused_connection_fails(run: Callable[..., Any]) -> None:
    async def go() -> str:
        async with Server(answering(ok())) as s:
            url = s.url
        await asyncio.sleep(0.01)
        c = client(url)  # nothing listens there any more
        with pytest.raises(http1.ConnectionFailed) as failed:
            await c.post(b"{}")
        await c.close()
        return str(failed.value)

    assert "could not connect to 127.0.0.1" in run(go())


def test_idle_connections_beyond_the_limit_are_closed(run: Callable[..., Any]) -> None:
    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while await server.read_request(reader) is not None:
            await asyncio.sleep(0.05)
            writer.write(ok())
            await writer.drain()

    async def go() -> tuple[int, int]:
        async with Server(slow) as s:
            c = client(s.url, max_idle=2)
            await asyncio.gather(*(c.post(b"{}") for _ in range(5)))
            for _ in range(50):
                if s.closed_by_client == 3:
                    break
                await asyncio.sleep(0.01)
            closed = s.closed_by_client
            await c.close()
            return s.connections, closed

    assert run(go()) == (5, 3)


def test_gzip_and_deflate_answers_are_decoded(run: Callable[..., Any]) -> None:
    gz, deflated = gzip.compress(b'{"a":1}'), zlib.compress(b'{"b":2}')

    async def go() -> list[bytes]:
        answers = ok(gz, b"Content-Encoding: gzip"), ok(deflated, b"Content-Encoding: deflate")
        async with Server(answering(*answers)) as s:
            c = client(s.url)
            bodies = [(await c.post(b"{}")).content for _ in range(2)]
            await c.close()
            return bodies

    assert run(go()) == [b'{"a":1}', b'{"b":2}']
    assert b"Accept-Encoding: identity" in http1.Client("http://h/", {}, timeout=1, max_idle=1)._head


def test_line_breaks_in_headers_are_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        http1.Client("http://127.0.0.1:9/v1", {"Authorization": "Bearer k\r\nX-Injected: 1"}, timeout=1, max_idle=1)
    with pytest.raises(ValueError, match="not an http"):
        http1.Client("ftp://127.0.0.1/", {}, timeout=1, max_idle=1)


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_https_verifies_the_server(run: Callable[..., Any], tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)

    async def go() -> tuple[bytes, str]:
        server = Server(answering(ok(b'{"tls":true}')))
        listening = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=server_context)
        url = f"https://127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1/chat/completions"
        trusted = client(url, ssl_context=ssl.create_default_context(cafile=str(cert)))
        body = (await trusted.post(b"{}")).content
        await trusted.close()
        untrusted = client(url)  # the default trust store does not know this certificate
        with pytest.raises(http1.ConnectionFailed) as failed:
            await untrusted.post(b"{}")
        await untrusted.close()
        listening.close()
        return body, str(failed.value)

    body, reason = run(go())
    assert body == b'{"tls":true}' and "CERTIFICATE_VERIFY_FAILED" in reason
