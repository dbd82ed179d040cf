"""The gateway against hostile endpoints: a key kept from a host whose name only looks like loopback, a reply
trickled a byte at a time cut by the attempt's and the request's deadline, and a look at ``GET /models`` that
takes the same reply guards as a completion."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.requests import Reply
from ifsynth.flows.llm.route import preflight, sendable_key
from ifsynth.schemas.config import Endpoint, RunConfig
from ifsynth.schemas.errors import EndpointDown
from ifsynth.warehouse.store import Warehouse
from tests.fake_openai import FakeOpenAI
from tests.helpers import GOOD, FakeClock, ask, config, query
from tests.servers import fixed_reply


@pytest.mark.parametrize("address, sent", [("192.0.2.7", False), ("127.0.0.1", True), ("::1", True)])
def test_loopback_is_decided_on_the_resolved_address(monkeypatch: pytest.MonkeyPatch, address: str, sent: bool) -> None:
    """``127.probe.test`` is loopback only if it resolves there; the spelling of a name decides nothing."""
    real = socket.getaddrinfo

    def resolve(host: str, *args: Any, **kwargs: Any) -> Any:
        if host != "127.probe.test":
            return real(host, *args, **kwargs)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setenv("PROBE_KEY", "sk-probe-secret")
    said: list[str] = []
    key = sendable_key("http://127.probe.test:8000/v1", "PROBE_KEY", said.append)
    assert (key == "sk-probe-secret") is sent
    assert bool(said) is not sent and all("plain http to another machine" in line for line in said)


def trickled(warehouse_path: Path, **endpoint: Any) -> Reply:
    with FakeOpenAI(hostile="trickle", trickle_pause=0.02) as fake, Warehouse(warehouse_path) as warehouse:

        async def go() -> list[Reply]:
            async with Gateway(config(fake, **endpoint), warehouse, "run-1", clock=FakeClock()) as gateway:
                return await gateway.ask_many("judge", [ask()])

        (reply,) = asyncio.run(go())
    return reply


def test_a_trickled_reply_is_cut_at_each_attempts_timeout(warehouse_path: Path) -> None:
    """Each byte arrives well within the timeout, so a timeout per read never fires; the attempt's does."""
    reply = trickled(warehouse_path, timeout=0.5, max_attempts=2, deadline=600)
    assert reply.status == "failed" and reply.sent == 2
    assert reply.error is not None and "Timeout" in reply.error


def test_a_trickled_reply_is_cut_at_the_requests_deadline(warehouse_path: Path) -> None:
    """The request's deadline is shorter than an attempt's timeout: it cuts the attempt under way."""
    reply = trickled(warehouse_path, timeout=600, max_attempts=3, deadline=0.5)
    assert reply.status == "failed" and reply.sent == 1
    assert reply.error is not None and "Timeout" in reply.error


@pytest.mark.parametrize("hostile, said", [
    ("chat_gzip_bomb", "Reply refused: a gzip-compressed reply, though only identity was accepted"),
    ("chat_oversize", "Reply refused: a reply over 16 MB"),
])  # fmt: skip
def test_a_completion_takes_the_reply_guards(warehouse_path: Path, hostile: str, said: str) -> None:
    """A compressed body is refused before it is read (a small gzip can inflate to gigabytes), and a body of
    no stated size is cut once past the cap, not read into memory."""
    with FakeOpenAI(hostile=hostile) as fake, Warehouse(warehouse_path) as warehouse:

        async def go() -> list[Reply]:
            async with Gateway(config(fake, max_attempts=1), warehouse, "run-1", clock=FakeClock()) as gateway:
                return await gateway.ask_many("judge", [ask()])

        (reply,) = asyncio.run(go())
    assert reply.status == "failed" and reply.error is not None and said in reply.error, reply


@pytest.mark.parametrize("not_http, said", [
    (b"THIS IS NOT HTTP\r\n\r\n", "THIS IS NOT HTTP"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n{}", "Content-Length"),
])  # fmt: skip
def test_a_reply_that_is_not_http_fails_its_attempts_not_the_run(
    warehouse_path: Path, not_http: bytes, said: str
) -> None:
    """Bytes that are not an HTTP reply are refused as a reply no answer can come from: the request fails at
    once (not retried), its attempt is journaled with what was wrong, and aiohttp's own error, which neither
    the SDK nor its transport maps, does not escape to stop the run."""
    with fixed_reply(200, not_http=not_http) as server, Warehouse(warehouse_path) as warehouse:
        endpoint = Endpoint(base_url=server.base_url, timeout=10, max_attempts=2)

        async def go() -> list[Reply]:
            run = RunConfig(recipe="instructir", seeds="demo", model="m", endpoint=endpoint)
            async with Gateway(run, warehouse, "run-1", clock=FakeClock()) as gateway:
                return await gateway.ask_many("judge", [ask()])

        (reply,) = asyncio.run(go())
        warehouse.flush()
        rows = query(warehouse, "SELECT error, failure FROM llm_calls ORDER BY attempt")
    assert reply.status == "failed" and reply.sent == 1 and reply.failure == "terminal", reply
    # aiohttp's own words differ between its C and its pure-Python parser; both quote what they could not read
    refused = "APIConnectionError: Reply refused: not an HTTP reply ("
    assert reply.error is not None and reply.error.startswith(refused) and said in reply.error, reply.error
    assert [row["failure"] for row in rows] == ["terminal"], rows
    assert all(row["error"] == reply.error for row in rows), rows
    assert len(server.hits) == 1


def test_replies_that_are_not_http_stop_the_run_in_a_line_without_the_key_they_echo(
    warehouse_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bytes quoted are the server's: a key it echoed is scrubbed from the breaker's line as from the
    journal, and ten such replies in a row stop the run as any replies it refuses."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-echoed-0123456789abcdef")
    echoed = b"sk-echoed-0123456789abcdef IS NOT HTTP\r\n\r\n"
    with fixed_reply(200, not_http=echoed) as server, Warehouse(warehouse_path) as warehouse:
        endpoint = Endpoint(base_url=server.base_url, timeout=10, max_attempts=1, concurrency=1)

        async def go() -> list[Reply]:
            run = RunConfig(recipe="instructir", seeds="demo", model="m", endpoint=endpoint)
            async with Gateway(run, warehouse, "run-1", clock=FakeClock()) as gateway:
                return await gateway.ask_many("judge", [ask(f"passage {i}") for i in range(12)])

        with pytest.raises(EndpointDown) as stopped:
            asyncio.run(go())
        warehouse.flush()
        stored = query(warehouse, "SELECT error FROM llm_calls")
    assert server.sent[0]["authorization"] == "Bearer sk-echoed-0123456789abcdef"  # the key was sent
    said = str(stopped.value)
    assert "sent replies ifsynth refuses (not an HTTP reply (" in said and "IS NOT HTTP" in said, said
    assert len(stored) == 10 and all("IS NOT HTTP" in row["error"] for row in stored)
    assert "0123456789abcdef" not in said and not any("0123456789abcdef" in row["error"] for row in stored)


@pytest.mark.parametrize("hostile, said", [
    ("models_gzip_bomb", "a gzip-compressed reply"),
    ("models_oversize", "a reply over 16 MB"),
])  # fmt: skip
def test_the_look_at_models_takes_the_reply_guards(hostile: str, said: str) -> None:
    with FakeOpenAI(hostile=hostile) as fake, pytest.raises(EndpointDown) as refused:
        preflight(Endpoint(base_url=fake.base_url, timeout=10))
    assert said in str(refused.value) and "refuses" in str(refused.value)


def test_the_look_at_models_sends_what_a_request_sends_and_names_the_key_it_was_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The look goes without the SDK, so it must send the key, organization and project the SDK would: a 401
    there is the key's fault, said before the run, and the path keeps the URL's query."""
    monkeypatch.setenv("MY_KEY", "sk-look-1234")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-look")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-look")
    with fixed_reply(401, b'{"error": {"message": "bad key"}}') as endpoint, pytest.raises(EndpointDown) as refused:
        preflight(Endpoint(base_url=endpoint.base_url + "?api-version=2", api_key_env="MY_KEY", timeout=10))
    assert "answered 401: check the key in MY_KEY" in str(refused.value)
    assert endpoint.hits == ["/v1/models?api-version=2"]
    sent = endpoint.sent[0]
    assert sent["authorization"] == "Bearer sk-look-1234" and sent["accept-encoding"] == "identity"
    assert sent["openai-organization"] == "org-look" and sent["openai-project"] == "proj-look"


@pytest.mark.parametrize("key, said", [
    ("sk-held-back-1234", "MY_KEY was held back: it goes over plain http only to this machine; give an https URL"),
    ("", "MY_KEY is not set or empty"),
    (None, "MY_KEY is not set or empty"),
])  # fmt: skip
def test_a_401_to_no_key_says_why_none_was_sent(monkeypatch: pytest.MonkeyPatch, key: str | None, said: str) -> None:
    """A key held back from plain http to another machine (the endpoint here taken for one), or one not set, is
    not a wrong key: the 401 says which, for the look and for the run's breaker alike."""
    from ifsynth.flows.llm import route

    monkeypatch.setattr(route, "is_loopback", lambda url: False)
    if key is None:
        monkeypatch.delenv("MY_KEY", raising=False)
    else:
        monkeypatch.setenv("MY_KEY", key)
    with fixed_reply(401, b'{"error": {"message": "no key"}}') as endpoint, pytest.raises(EndpointDown) as refused:
        preflight(Endpoint(base_url=endpoint.base_url, api_key_env="MY_KEY", timeout=10))
    assert str(refused.value).endswith(f"answered 401: {said}")
    assert "authorization" not in endpoint.sent[0]
    assert route.Route(Endpoint(base_url=endpoint.base_url, api_key_env="MY_KEY")).breaker.key_advice == said
    with_user = endpoint.base_url.replace("://", "://me:pa55word@")
    basic = "check the user and password in the base URL, sent as HTTP Basic auth"
    assert route.key_advice("MY_KEY", with_user, None) == f"{basic} ({said})"


def test_the_deadline_runs_from_the_first_attempt_not_from_the_queue(warehouse_path: Path) -> None:
    """Asks queued behind a concurrency of one wait longer than the deadline in all; none is cut for it."""
    with (
        FakeOpenAI(mode="responder", responder=lambda body: GOOD, latency=0.5) as fake,
        Warehouse(warehouse_path) as warehouse,
    ):

        async def go() -> list[Reply]:
            # each answer well within the deadline, however slow the machine; the five together, not
            settings = config(fake, concurrency=1, deadline=1.5, max_attempts=1)
            async with Gateway(settings, warehouse, "run-1") as gateway:
                return await gateway.ask_many("judge", [ask(f"judge {n}") for n in range(5)])

        replies = asyncio.run(go())
    assert [reply.status for reply in replies] == ["ok"] * 5


def test_a_401_from_the_embedded_model_does_not_blame_a_key() -> None:
    """The embedded model's server takes any key (the client sends a fixed one): no key of the user's is at
    fault, whatever the environment holds."""
    from ifsynth.flows.llm.route import LOCAL_BASE_URL, key_advice

    for sent in ("local", None):
        assert key_advice("OPENAI_API_KEY", LOCAL_BASE_URL, sent).startswith("the embedded model's server refused")
