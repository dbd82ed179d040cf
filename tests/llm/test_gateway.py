"""The gateway against the loopback fake: retries, Retry-After, no retry on 4xx, re-asks, the cache,
the three structured-output styles, the concurrency bound, and keys kept out of the warehouse."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.limits import AdaptiveLimit
from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.prompts.registry import Rendered
from ifsynth.schemas.answers import RelevanceJudgement
from ifsynth.schemas.config import Endpoint
from ifsynth.schemas.errors import IfsynthError
from ifsynth.warehouse.store import Warehouse
from tests.fake_openai import FakeOpenAI
from tests.helpers import GOOD, FakeClock, ask, config, query


def answer(
    fake: FakeOpenAI, warehouse: Warehouse, asks: list[Ask], clock: FakeClock | None = None, **endpoint: Any
) -> list[Reply]:
    """The replies to ``asks``; the gateway waits by ``clock``, a fake one: backoff takes no time."""

    async def go() -> list[Reply]:
        async with Gateway(config(fake, **endpoint), warehouse, "run-1", clock=clock or FakeClock()) as gateway:
            return await gateway.ask_many("judge", asks)

    return asyncio.run(go())


def calls(warehouse: Warehouse) -> list[dict[str, Any]]:
    warehouse.flush()
    return query(
        warehouse, "SELECT key, http_status, error, failure, response, attempt FROM llm_calls ORDER BY created_at"
    )


@pytest.fixture
def warehouse(warehouse_path: Path) -> Iterator[Warehouse]:
    with Warehouse(warehouse_path) as opened:
        yield opened


def test_retries_429_and_500_then_succeeds(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD, script=["429", "500", "ok"], retry_after=0.3)
    clock = FakeClock()
    (reply,) = answer(fake, warehouse, [ask()], clock)
    assert reply.status == "ok" and reply.value == RelevanceJudgement.model_validate(GOOD)
    assert reply.sent == 3
    honoured, backoff = clock.slept
    assert honoured == pytest.approx(0.3), "Retry-After was not honoured"
    assert 2.0 <= backoff < 3.0, "the second failure waits 2 s and up to 1 s of jitter"
    rows = calls(warehouse)
    assert [r["http_status"] for r in rows] == [429, 500, 200]
    assert rows[0]["error"].startswith("RateLimitError") and rows[-1]["error"] is None
    assert [r["failure"] for r in rows] == ["transient", "transient", None] and reply.failure is None
    assert len({r["key"] for r in rows}) == 1


@pytest.mark.parametrize("status", ["400", "422"])
def test_client_errors_are_not_retried(fake: FakeOpenAI, warehouse: Warehouse, status: str) -> None:
    fake.configure(script=[status, "ok"])
    (reply,) = answer(fake, warehouse, [ask()])
    assert reply.status == "failed" and (reply.error or "").startswith(f"HTTP {status}") and reply.failure == "terminal"
    assert fake.stats()["requests"] == 1
    assert [(r["http_status"], r["failure"]) for r in calls(warehouse)] == [(int(status), "terminal")]


def test_gives_up_after_max_attempts(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(script=["500"] * 10)
    clock = FakeClock()
    (reply,) = answer(fake, warehouse, [ask()], clock, max_attempts=3)
    assert reply.status == "failed" and "HTTP 500" in (reply.error or "") and reply.failure == "transient"
    assert fake.stats()["requests"] == 3 and len(calls(warehouse)) == 3
    first, second = clock.slept  # exponential backoff with jitter between attempts, none after the last
    assert 1.0 <= first < 2.0 and 2.0 <= second < 3.0


def test_no_retry_would_end_past_the_deadline(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(script=["500"] * 10)
    clock = FakeClock()
    (reply,) = answer(fake, warehouse, [ask()], clock, max_attempts=5, deadline=3.0)
    assert reply.status == "failed" and "HTTP 500" in (reply.error or "")
    assert fake.stats()["requests"] == 2, "a third attempt would start 3 to 5 s after the first, past the 3 s deadline"
    assert len(clock.slept) == 1 and 1.0 <= clock.slept[0] < 2.0


def test_timeouts_are_retried(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD, script=["timeout", "ok"], timeout_sleep=3.0)
    clock = FakeClock()
    (reply,) = answer(fake, warehouse, [ask()], clock, timeout=2.0)  # the retry's answer within it, if slow
    assert reply.status == "ok"
    assert calls(warehouse)[0]["error"].startswith("APITimeoutError")
    assert len(clock.slept) == 1 and 1.0 <= clock.slept[0] < 2.0


def test_unparseable_answers_are_reasked_at_most_twice(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(mode="responder", responder=lambda body: "not json at all")
    (reply,) = answer(fake, warehouse, [ask()])
    assert reply.status == "parse_error" and reply.raw == "not json at all" and reply.failure == "terminal"
    assert all(r["failure"] is None for r in calls(warehouse)), "each answer came; none could be used"
    assert len(set(reply.keys)) == 3 and fake.stats()["requests"] == 3
    assert [r["seed"] for r in fake.requests] == [0, 1, 2]
    reask = fake.requests[1]["messages"]
    assert reask[-2] == {"role": "assistant", "content": "not json at all"}
    assert "could not be used" in reask[-1]["content"]


def test_a_reask_can_repair_the_answer(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD if len(body["messages"]) > 1 else "{oops")
    (reply,) = answer(fake, warehouse, [ask()])
    assert reply.status == "ok" and len(reply.keys) == 2


def test_cut_off_answers_say_so(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD, rate_length=1.0)
    (reply,) = answer(fake, warehouse, [ask()])
    assert reply.status == "parse_error" and "cut off at max_tokens" in (reply.error or "")
    assert reply.cut and reply.failure == "terminal"
    assert fake.stats()["requests"] == 1, "not re-asked: at the same budget the answer would run on again"


def test_answered_requests_come_from_the_cache(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD)
    asks = [ask(f"question {i}") for i in range(5)]
    first = answer(fake, warehouse, asks)
    again = answer(fake, warehouse, asks)
    assert fake.stats()["requests"] == 5
    assert [r.value for r in again] == [r.value for r in first]
    assert all(r.cached == 1 and r.sent == 0 for r in again)


def test_identical_asks_under_way_at_once_send_one_request_and_share_its_answer(
    fake: FakeOpenAI, warehouse: Warehouse
) -> None:
    """Two items may render the same request; sent twice, a sampling server could answer each differently,
    and a rerun would then give both the one answer the cache holds: another funnel than the first run's."""
    answers = iter(range(100))
    fake.configure(latency=0.2, mode="responder", responder=lambda body: {**GOOD, "score": next(answers) % 2 + 1})
    first = answer(fake, warehouse, [ask("same"), ask("same"), ask("other")])
    assert fake.stats()["requests"] == 2
    assert first[0].value == first[1].value and first[0].status == first[1].status == "ok"
    assert [(r.sent, r.cached) for r in first] == [(1, 0), (0, 1), (1, 0)]
    again = answer(fake, warehouse, [ask("same"), ask("same"), ask("other")])
    assert [r.value for r in again] == [r.value for r in first] and fake.stats()["requests"] == 2


def test_a_twin_whose_answer_landed_while_its_chunk_was_looked_up_is_not_sent_again(
    fake: FakeOpenAI, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second twin's chunk is looked up while the first is under way, and that lookup ends after the first
    twin's answer landed: neither under way nor in what the lookup found, it must still not be sent again."""
    from ifsynth.flows.llm import gateway

    monkeypatch.setattr(gateway, "CHUNK", 2)  # [twin, other], then [twin]
    lookups = iter([0.0, 0.6])
    real = warehouse.cached

    def slow(keys: Any) -> dict[str, Any]:
        found = real(keys)  # read before the first twin lands (its request takes 0.2 s), returned after
        threading.Event().wait(next(lookups, 0.0))
        return found

    monkeypatch.setattr(warehouse, "cached", slow)
    answers = iter(range(100))
    fake.configure(latency=0.2, mode="responder", responder=lambda body: {**GOOD, "score": next(answers) % 5 + 1})
    first = answer(fake, warehouse, [ask("twin-query"), ask("other"), ask("twin-query")], concurrency=8)
    assert sum("twin-query" in json.dumps(sent) for sent in fake.requests) == 1
    assert first[0].value == first[2].value and [(r.sent, r.cached) for r in first] == [(1, 0), (1, 0), (0, 1)]


def test_an_answer_that_stops_the_call_while_its_chunk_starts_stops_the_rest_of_the_chunk(
    fake: FakeOpenAI, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's handling of the first answer (from the cache, so handled as its ask starts) fails: the
    asks of the chunk not yet started are not started, and nothing is sent after the stop."""
    from ifsynth.flows.llm import gateway

    fake.configure(mode="responder", responder=lambda body: GOOD)
    answer(fake, warehouse, [ask("cached first")])
    monkeypatch.setattr(gateway, "SLICE", 1)  # the event loop turns between every two asks started

    def refuse(index: int, reply: Reply) -> None:
        raise ValueError("the caller stops here")

    opened = Gateway(config(fake), warehouse, "run-1", clock=FakeClock())

    async def go() -> None:
        async with opened:
            await opened.ask_many("judge", [ask("cached first"), *(ask(f"new {i}") for i in range(20))], refuse)

    with pytest.raises(ValueError, match="the caller stops here"):
        asyncio.run(go())
    assert fake.stats()["requests"] == 1, "only the first call's request"
    assert opened.pending == 0


def test_a_lookup_that_fails_ends_the_asks_already_started(
    fake: FakeOpenAI, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second chunk's lookup fails while the first chunk's requests are under way: those are cancelled
    and ended before the error is raised, not left sending (and retrying) after the call has failed."""
    from ifsynth.flows.llm import gateway

    monkeypatch.setattr(gateway, "CHUNK", 2)
    lookups = iter([False, True])
    real = warehouse.cached

    def failing(keys: Any) -> dict[str, Any]:
        if next(lookups):
            raise OSError("the disk went away")
        return real(keys)

    monkeypatch.setattr(warehouse, "cached", failing)
    fake.configure(latency=0.5, mode="responder", responder=lambda body: GOOD)
    opened = Gateway(config(fake), warehouse, "run-1", clock=FakeClock())
    under_way: list[int] = []

    async def go() -> None:
        async with opened:
            try:
                await opened.ask_many("judge", [ask(f"q {i}") for i in range(3)])
            finally:
                under_way.append(opened.pending)

    with pytest.raises(OSError, match="the disk went away"):
        asyncio.run(go())
    assert under_way == [0], "the first chunk's asks ended with the call"


def test_an_ask_whose_twin_failed_fails_with_it_and_sends_nothing(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    """The twin made the retries for both: sent again one after the other, k twins would take k times the
    retries' time, for the same failure."""
    fake.configure(latency=0.2, script=["400", "ok"])
    first, second = answer(fake, warehouse, [ask("same"), ask("same")])
    assert first.status == second.status == "failed" and first.error == second.error
    assert (first.sent, second.sent) == (1, 0) and fake.stats()["requests"] == 1


def test_failed_requests_are_not_cached(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(script=["400"])
    assert answer(fake, warehouse, [ask()])[0].status == "failed"
    fake.configure(mode="responder", responder=lambda body: GOOD)
    assert answer(fake, warehouse, [ask()])[0].status == "ok"
    assert fake.stats()["requests"] == 2


@pytest.mark.parametrize("style", ["json_schema", "json_object", "none"])
def test_structured_output_styles(fake: FakeOpenAI, warehouse: Warehouse, style: str) -> None:
    (reply,) = answer(fake, warehouse, [ask()], structured_output=style)  # random valid instances
    assert reply.status == "ok" and isinstance(reply.value, RelevanceJudgement)
    sent = fake.requests[0]
    if style == "json_schema":
        assert sent["response_format"]["type"] == "json_schema"
        assert sent["response_format"]["json_schema"]["strict"] is True
        assert sent["response_format"]["json_schema"]["schema"]["properties"]["score"]["enum"] == [1, 2, 3, 4, 5]
    elif style == "json_object":
        assert sent["response_format"]["type"] == "json_object"
        assert sent["response_format"]["schema"]["required"] == ["explanation", "score"]
    else:
        assert "response_format" not in sent
        assert "```json" in sent["messages"][-1]["content"]
        assert "```json" in calls(warehouse)[0]["response"]  # the fake wrapped it in prose


def test_concurrency_is_bounded(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD, latency=0.2)
    replies = answer(fake, warehouse, [ask(f"q{i}") for i in range(12)], concurrency=3)
    assert [r.status for r in replies] == ["ok"] * 12
    assert fake.stats()["peak_in_flight"] == 3, "never more than three requests held by the server at once"


def test_adaptive_limit_halves_on_a_burst_and_grows_back() -> None:
    limit = AdaptiveLimit(16, cooldown=60)
    limit.throttled()
    limit.throttled()  # same burst: counts once
    assert limit.limit == 8 and limit.cuts == 1
    for _ in range(8):
        limit.succeeded()
    assert limit.limit == 9
    for _ in range(200):
        limit.succeeded()
    assert limit.limit == 16


def test_the_key_never_reaches_the_warehouse(
    fake: FakeOpenAI, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-4f1d9e0c2b7a-DO-NOT-STORE"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    fake.configure(script=["429", "ok"])
    answer(fake, warehouse, [ask()])
    assert fake.headers[0]["authorization"] == f"Bearer {secret}"
    warehouse.flush()
    dump = json.dumps(query(warehouse, "SELECT * FROM llm_calls"), default=str)
    assert secret not in dump
    warehouse.checkpoint()
    assert secret.encode() not in warehouse.path.read_bytes()


def test_organization_and_project_are_sent_as_the_sdk_sends_them(
    fake: FakeOpenAI, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-test")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-test")
    answer(fake, warehouse, [ask()])
    assert fake.headers[0]["openai-organization"] == "org-test"
    assert fake.headers[0]["openai-project"] == "proj-test"
    monkeypatch.delenv("OPENAI_PROJECT_ID")
    answer(fake, warehouse, [ask("other")])
    assert "openai-project" not in fake.headers[1]


def test_a_refused_connection_is_recorded_as_one_and_stops_the_stage(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    from ifsynth.schemas.errors import EndpointDown
    from tests.servers import free_port

    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there, and nothing ever answered
    with pytest.raises(EndpointDown, match=r"cannot be reached \(Connection error: Cannot connect"):
        answer(fake, warehouse, [ask(), ask()], base_url=closed, max_attempts=3)
    errors = [row["error"] for row in calls(warehouse)]
    assert errors and all(e.startswith("APIConnectionError: Connection error: Cannot connect") for e in errors)
    assert len(errors) <= 2, "no retry once the endpoint is known to be unreachable"


def test_a_reset_connection_is_recorded_as_a_reset_not_a_timeout(fake: FakeOpenAI, warehouse: Warehouse) -> None:
    """A server that drops each connection with a TCP RST once it has the request."""
    listener = socket.create_server(("127.0.0.1", 0))

    def reset() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                conn.recv(65536)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()

    threading.Thread(target=reset, daemon=True).start()
    try:
        with contextlib.suppress(IfsynthError):  # the endpoint may be judged down: the record is what matters
            answer(fake, warehouse, [ask()], base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
                   max_attempts=2)  # fmt: skip
    finally:
        listener.close()
    errors = [row["error"] for row in calls(warehouse)]
    assert errors and all(e.startswith("APIConnectionError: Connection reset") for e in errors), errors


def test_an_endpoint_behind_a_proxy_is_reached_through_it(
    fake: FakeOpenAI, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY is honoured: a host that does not resolve is reached through the proxy (the fake, which
    serves the forwarded request), and the call is recorded under the endpoint's URL, not the proxy's."""
    monkeypatch.setenv("HTTP_PROXY", fake.base_url.removesuffix("/v1"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    (reply,) = answer(fake, warehouse, [ask()], base_url="http://ifsynth-behind-a-proxy.invalid/v1")
    assert reply.status == "ok" and fake.stats()["requests"] == 1
    assert calls(warehouse)[0]["http_status"] == 200
    assert (
        query(warehouse, "SELECT base_url FROM llm_calls")[0]["base_url"] == "http://ifsynth-behind-a-proxy.invalid/v1"
    )


def test_openai_hosts_get_the_strict_subset_of_json_schema() -> None:
    from ifsynth.flows.llm.route import Route
    from ifsynth.schemas.answers import instruction_list

    ask_three = Ask(Rendered("t", "h", ({"role": "user", "content": "x"},)), instruction_list(3), "generator", 1, 9)
    for url, lengths in (("https://api.openai.com/v1", False), ("http://localhost:8000/v1", True)):
        body = Route(Endpoint(base_url=url)).body(ask_three, "m", 0, [{"role": "user", "content": "x"}])
        assert ("minLength" in json.dumps(body["response_format"])) is lengths
