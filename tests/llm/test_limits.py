"""Rate limits, the adaptive bound and budgets: unit tests on a fake clock, then the gateway against the fake."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ifsynth.flows.llm.gateway import Gateway
from ifsynth.flows.llm.limits import PRIORITY, AdaptiveLimit, Budget, RateLimit, parse_reset
from ifsynth.schemas.errors import BudgetExhausted
from ifsynth.warehouse.store import Warehouse
from tests.fake_openai import FakeOpenAI
from tests.helpers import GOOD, FakeClock, ask, config, query


def acquire_all(rate: RateLimit, tokens: list[float]) -> None:
    async def go() -> None:
        for amount in tokens:
            await rate.acquire(amount)

    asyncio.run(go())


def test_requests_per_minute_spaces_requests_once_the_bucket_is_empty() -> None:
    clock = FakeClock()
    rate = RateLimit(rpm=60, clock=clock)
    acquire_all(rate, [0] * 60)
    assert clock.slept == [], "a full bucket lets a minute's worth through at once"
    acquire_all(rate, [0] * 3)
    assert clock.slept == pytest.approx([1.0, 1.0, 1.0])


def test_tokens_per_minute_waits_for_what_a_request_needs() -> None:
    clock = FakeClock()
    rate = RateLimit(tpm=6000, clock=clock)
    acquire_all(rate, [5000, 3000])
    assert sum(clock.slept) == pytest.approx(20.0)  # 2000 tokens missing at 100 tokens/s


def test_headers_set_the_limits_when_the_config_has_none() -> None:
    clock = FakeClock()
    rate = RateLimit(clock=clock)
    assert rate.delay(100) == 0
    rate.observe({"x-ratelimit-limit-requests": "120", "x-ratelimit-remaining-requests": "0",
                  "x-ratelimit-reset-requests": "2.5s", "x-ratelimit-limit-tokens": "1000000"})  # fmt: skip
    assert rate.requests is not None and rate.requests.capacity == 120
    assert rate.delay(100) == pytest.approx(2.5), "nothing remains: wait for the server's reset"
    rate.observe({"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499"})
    assert rate.requests.capacity == 120, "a configured or learned limit is never raised by a header"


def test_configured_limit_is_lowered_by_a_stricter_server() -> None:
    clock = FakeClock()
    rate = RateLimit(rpm=1000, clock=clock)
    rate.observe({"x-ratelimit-limit-requests": "30", "x-ratelimit-remaining-requests": "0",
                  "x-ratelimit-reset-requests": "1m0s"})  # fmt: skip
    assert rate.requests is not None and rate.requests.capacity == 30
    assert rate.delay(0) == pytest.approx(60.0)


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1), ("6m0s", 360), ("120ms", 0.12), ("1h2m3s", 3723), ("7", 7)])
def test_reset_durations(text: str, seconds: float) -> None:
    assert parse_reset(text) == pytest.approx(seconds)


def test_a_burst_of_429s_cuts_the_bound_once_and_successes_grow_it_back() -> None:
    clock = FakeClock()
    limit = AdaptiveLimit(16, cooldown=1.0, clock=clock)
    for _ in range(10):  # one burst: ten 429s within the cool-down
        limit.throttled()
    assert (limit.limit, limit.cuts) == (8, 1)
    clock.now += 1.0
    limit.throttled()
    assert (limit.limit, limit.cuts) == (4, 2)
    for _ in range(4 + 5 + 6 + 7):
        limit.succeeded()
    assert limit.limit == 8
    for _ in range(200):
        limit.succeeded()
    assert limit.limit == 16, "back to the configured maximum, never above"


def test_the_bound_admits_waiters_in_order_as_it_grows() -> None:
    async def go() -> list[int]:
        limit = AdaptiveLimit(2)
        limit.limit = 1
        order: list[int] = []

        async def worker(i: int) -> None:
            async with limit:
                order.append(i)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(worker(i) for i in range(5)))
        assert limit.in_flight == 0
        return order

    assert asyncio.run(go()) == [0, 1, 2, 3, 4]


def test_a_waiter_of_higher_priority_takes_the_next_free_place() -> None:
    """Stages that run together: a later stage's request, finishing what is begun, goes before an earlier
    stage's that waited longer; among equals, the order they came in. A cancelled waiter holds no place."""

    async def go() -> list[tuple[int, int]]:
        limit = AdaptiveLimit(1)
        order: list[tuple[int, int]] = []
        release = asyncio.Event()

        async def worker(priority: int, i: int) -> None:
            PRIORITY.set(priority)
            async with limit:
                order.append((priority, i))
                await release.wait()

        holder = asyncio.ensure_future(worker(0, 0))
        await asyncio.sleep(0)
        waiting = [asyncio.ensure_future(worker(p, i)) for i, p in enumerate([0, 2, 1, 2, 0], 1)]
        gone = asyncio.ensure_future(worker(3, 9))
        await asyncio.sleep(0)
        gone.cancel()
        release.set()
        await asyncio.gather(holder, *waiting)
        assert limit.in_flight == 0
        async with asyncio.timeout(1):  # nothing is left waiting in its queues: an idle limit lets one in
            async with limit:
                pass
        return order

    assert asyncio.run(go()) == [(0, 0), (2, 2), (2, 4), (1, 3), (0, 1), (0, 5)]


def test_budget_refuses_the_call_past_the_limit() -> None:
    budget = Budget(max_calls=2)
    budget.reserve(None)
    budget.reserve(None)
    with pytest.raises(BudgetExhausted, match="2 calls"):
        budget.reserve(None)
    dollars = Budget(max_cost=1.0)
    dollars.settle(dollars.reserve(0.6), 0.1)  # the actual cost replaces the worst case
    dollars.reserve(0.8)
    with pytest.raises(BudgetExhausted, match=r"\$1"):
        dollars.reserve(0.2)


def test_gateway_learns_rpm_from_the_servers_headers(fake: FakeOpenAI, warehouse_path: Path) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD, rpm=50)

    async def go() -> RateLimit:
        with Warehouse(warehouse_path) as warehouse:
            async with Gateway(config(fake, concurrency=1), warehouse, "run-1") as gateway:
                await gateway.ask_many("judge", [ask(f"q{i}") for i in range(3)])
                return gateway.route("generator").rate

    rate = asyncio.run(go())
    assert rate.requests is not None and rate.requests.capacity == 50
    assert rate.requests.level <= 47 + 1e-6


def test_budget_stops_the_gateway_before_the_limit_and_the_cache_resumes(
    fake: FakeOpenAI, warehouse_path: Path
) -> None:
    fake.configure(mode="responder", responder=lambda body: GOOD)
    asks = [ask(f"q{i}") for i in range(5)]

    def attempt(budget: Budget) -> None:
        async def go() -> None:
            with Warehouse(warehouse_path) as warehouse:
                async with Gateway(config(fake, concurrency=2), warehouse, "run-1", budget=budget) as gateway:
                    await gateway.ask_many("judge", asks)

        asyncio.run(go())

    with pytest.raises(BudgetExhausted):
        attempt(Budget(max_calls=3))
    assert fake.stats()["requests"] == 3, "never past the budget, even with requests in flight"
    attempt(Budget(max_calls=2))  # the three answered ones are cache hits, free
    assert fake.stats()["requests"] == 5


@pytest.mark.usefixtures("prefect")  # runs a flow: on the session's Prefect server
def test_a_run_stopped_by_its_budget_is_marked_stopped_and_continues(
    tmp_path: Path, make_fake: Callable[..., FakeOpenAI]
) -> None:
    from ifsynth.flows.run.config import resolve
    from ifsynth.flows.run.runner import execute
    from ifsynth.warehouse import audit
    from tests.helpers import sensible

    warehouse = tmp_path / "w.duckdb"
    server = make_fake(mode="responder", responder=sensible)

    def run(**budget: Any) -> str:
        settings = resolve(
            "instructir", seeds="demo", limit=3, base_url=server.base_url, model="m",
            sets=["instructions_per_query=3", "min_group_size=1"], **budget,
        )  # fmt: skip
        return execute(settings, warehouse).run_id

    with pytest.raises(BudgetExhausted, match="stopped: budget of 7 calls"):
        run(max_calls=7)
    assert server.stats()["requests"] == 7
    with Warehouse(warehouse, read_only=True) as wh:
        assert wh.run().status == "stopped"
    run_id = run()
    with Warehouse(warehouse, read_only=True) as wh:
        report = audit.funnel(wh, run_id)
        (dupes,) = query(wh, "SELECT count(*) - count(DISTINCT key) AS n FROM llm_calls")
    assert report["status"] == "completed" and report["accepted"] > 0
    assert report["llm_calls"]["sent"] == server.stats()["requests"] > 7
    assert dupes["n"] == 0, "nothing answered before the stop was asked again"
