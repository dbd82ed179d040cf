"""The LLM gateway: the one place that owns the openai clients and decides retries.

Every stage hands it ``Ask``s and gets ``Reply``s back. On the way it looks up the warehouse cache, bounds
concurrency per endpoint, retries transient failures (``retry.is_transient``), records every attempt in
``llm_calls``, validates the answer against its pydantic model and re-asks a bounded number of times when it
does not parse. In batch mode the uncached requests of a page go out through ``batch`` first.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base

from ifsynth.flows.llm import batch, openai
from ifsynth.flows.llm.answers import call_cost, decode_completion, parse_answer
from ifsynth.flows.llm.clock import SYSTEM_CLOCK, Clock
from ifsynth.flows.llm.landed import Landed
from ifsynth.flows.llm.limits import Budget
from ifsynth.flows.llm.pool import Pool
from ifsynth.flows.llm.requests import A, Ask, Reply, Request
from ifsynth.flows.llm.retry import Backoff, failure, is_transient, pause, retry_after
from ifsynth.flows.llm.route import Route, error_text
from ifsynth.schemas.config import Endpoint, Role, RunConfig
from ifsynth.schemas.errors import BudgetExhausted, EndpointDown
from ifsynth.schemas.records import CallRecord, Failure
from ifsynth.warehouse.keys import cache_key, canonical_request
from ifsynth.warehouse.store import Warehouse

MAX_REASKS = 2
CHUNK, MAX_CHUNK = 256, 4096  # asks looked up in the cache at a time, first and at most (see Gateway.ask_many)
SLICE = 32  # asks keyed, or started, before the event loop is given back
NOTICE_WAIT = 5.0  # seconds of Retry-After worth a line on the progress display
T = TypeVar("T")
Answered = tuple[str | None, str | None, list[dict[str, Any]] | None]  # an answer's text, finish reason, logprobs


class Since:
    """How long a request has taken, from when its first attempt went out, by the gateway's clock (a test's is
    fake): the time it waited for a free place under the endpoint's concurrency bound is the run's own queue,
    not the endpoint's time."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.began: float | None = None

    def start(self) -> None:
        if self.began is None:
            self.began = self.clock.monotonic()

    def elapsed(self) -> float:
        return 0.0 if self.began is None else self.clock.monotonic() - self.began

    def window(self, endpoint: Endpoint) -> float:
        """The seconds an attempt going out now may take: the endpoint's timeout, cut to what is left of the
        request's deadline."""
        self.start()
        return max(0.0, min(endpoint.timeout, endpoint.deadline - self.elapsed()))


def refused(
    route: Route, exc: openai.APIStatusError | openai.APIConnectionError, budget: Budget | None, reserved: float
) -> int | None:
    """What a failed attempt tells the route and the budget: the server's rate-limit headers, no cost when it
    answered with an error (the reservation kept when it did not answer: it may have run), a narrower
    concurrency bound on a 429. Returns the HTTP status, if the server answered."""
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    if isinstance(exc, openai.APIStatusError):
        route.rate.observe(exc.response.headers)
    if budget is not None:
        budget.settle(reserved, 0.0 if status is not None else None)
    if status == 429:
        route.limit.throttled()
    return status


class PastDeadline(stop_base):
    """tenacity's ``stop_before_delay``, from the first attempt on and by the gateway's clock."""

    def __init__(self, since: Since, deadline: float) -> None:
        self.since, self.deadline = since, deadline

    def __call__(self, state: RetryCallState) -> bool:
        return self.since.elapsed() + state.upcoming_sleep >= self.deadline


class Gateway:
    """Answers asks for one run: one stage, or the stages that run together; open it with ``async with``."""

    def __init__(
        self,
        config: RunConfig,
        warehouse: Warehouse,
        run_id: str,
        *,
        seed: int = 0,
        budget: Budget | None = None,
        notify: Callable[[str], None] = lambda _: None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.notify = notify
        self.clock = clock
        self._quiet_until = 0.0
        self.warehouse = warehouse
        self.run_id = run_id
        self.seed = seed
        self.budget = budget
        self._pools: dict[Endpoint, Pool] = {}
        self._by_role: dict[Role, Pool] = {}
        # Call ids: a random prefix per gateway and a counter, unique without a system call per request.
        self._call_prefix = uuid.uuid4().hex[:20]
        self._calls = itertools.count()
        self.pending = 0  # asks started and not yet answered, over every ask_many under way
        self._flying: dict[str, asyncio.Future[Answered | GatewayFailure | None]] = {}  # key -> how it ended
        self._landed: Landed[Answered] = Landed()  # what a lookup under way may have missed

    async def __aenter__(self) -> Gateway:
        for role in ("generator", "judge"):
            endpoint = self.config.endpoint_for(role)
            if endpoint not in self._pools:
                self._pools[endpoint] = Pool(endpoint, self.notify, self.clock)
            self._by_role[role] = self._pools[endpoint]
        return self

    async def __aexit__(self, *_: object) -> None:
        for pool in self._pools.values():
            await pool.close()
        self._pools.clear()
        self._by_role.clear()

    def _settled(self, _: object) -> None:
        self.pending -= 1

    @property
    def capacity(self) -> int:
        """How many asks the endpoints take at once."""
        return max(pool.capacity for pool in self._pools.values())

    def crowded(self) -> bool:
        """Whether as many asks are under way as the endpoints take at once: another would wait its turn."""
        return self.pending >= self.capacity

    def route(self, role: Role) -> Route:
        """The role's endpoint (a pool's first member: every member takes the same requests)."""
        return self._by_role[role].first

    async def ask_many(
        self,
        stage: str,
        asks: Sequence[Ask[A]],
        on_reply: Callable[[int, Reply[A]], None] | None = None,
        started: asyncio.Event | None = None,
    ) -> list[Reply[A]]:
        """Answer every ask, cached ones first; concurrency is bounded per endpoint. ``on_reply(i, reply)`` is
        called as each answer arrives (``i``: its place in ``asks``), so a caller handles it while the others
        are in flight; if it raises, the asks still in flight are dropped and its error is raised. ``started``
        is set once every ask has been looked up in the cache and started.

        Asks are keyed and looked up in the cache a chunk at a time, the next chunk while half of one still
        waits to be sent: preparing holds the event loop (answers that arrive meanwhile wait), so a whole
        page prepared up front would stall the first requests. The first chunk is small, so requests leave
        at once; each next one is twice as large, up to MAX_CHUNK, because a lookup scans every call in the
        warehouse whatever the number of keys. Lookups run in a worker thread: DuckDB scans without the GIL,
        so answers keep being handled meanwhile. In batch mode the whole page is prepared first: its uncached
        requests go out as one batch."""
        stopped: list[Exception] = []
        size = len(asks) if self.config.batch else CHUNK
        bound = max(pool.capacity for pool in self._pools.values())
        low = bound  # the next chunk is prepared once at most this many asks are outstanding
        room = asyncio.Event()
        outstanding = 0

        async def one(index: int, ask: Ask[A], request: Request, cache: dict[str, Any]) -> Reply[A] | None:
            nonlocal outstanding
            try:
                reply = await self._answer(stage, ask, request, cache)
            except BudgetExhausted as exc:
                stopped.append(exc)  # the others finish what they reserved: those answers land in the cache
                return None
            except EndpointDown as exc:
                drop(exc)  # nothing more to wait for: the endpoint cannot answer them
                return None
            finally:
                outstanding -= 1
                if outstanding <= low:
                    room.set()
            if on_reply is not None:
                try:
                    on_reply(index, reply)
                except Exception as exc:  # raised once the asks in flight are cancelled
                    drop(exc)
                    return None
            return reply

        def drop(exc: Exception) -> None:
            """Stop: ``exc`` is raised once every ask still in flight is cancelled."""
            stopped.append(exc)
            for task in tasks:
                task.cancel()

        tasks: list[asyncio.Future[Reply[A] | None]] = []
        start = 0
        try:
            while start < len(asks) and not stopped:
                if outstanding > low:
                    room.clear()
                    await room.wait()
                part = asks[start : start + size]
                start += len(part)
                size = min(size * 2, MAX_CHUNK)
                low = bound + size // 2
                first: list[Request] = []
                for at in range(0, len(part), SLICE):  # answers that arrive meanwhile are handled between slices
                    first += [self._request(ask, list(ask.prompt.messages), 0) for ask in part[at : at + SLICE]]
                    await asyncio.sleep(0)
                keys = [request.key for request in first]
                look = True
                if self.config.batch:  # the page's uncached requests answered through the Batch API first
                    cache = await asyncio.to_thread(self.warehouse.cached, keys)
                    missing = {r.key: (ask, r.body) for ask, r in zip(part, first, strict=True) if r.key not in cache}
                    look = bool(missing)  # looked up again after the wait: it may have answered them
                    if missing:
                        await self._fetch_batch(stage, missing)
                with self._landed.lookup():  # until its asks have looked at what is under way and what landed
                    if look:
                        cache = await asyncio.to_thread(self.warehouse.cached, keys)
                    for at in range(0, len(part), SLICE):
                        if stopped:  # an answer handled meanwhile stopped the call: start nothing more
                            break
                        starting = part[at : at + SLICE]
                        outstanding += len(starting)
                        self.pending += len(starting)
                        pairs = zip(starting, first[at : at + SLICE], strict=True)
                        started_now = [
                            asyncio.ensure_future(one(len(tasks) + n, ask, request, cache))
                            for n, (ask, request) in enumerate(pairs)
                        ]
                        for task in started_now:  # however it ends, cancelled before it began included
                            task.add_done_callback(self._settled)
                        tasks += started_now
                        await asyncio.sleep(0)  # let these requests go out: each task's first step sends or waits
        except BaseException:  # cancelled, or a lookup failed: the asks started must not go on sending
            for begun in tasks:
                begun.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if started is not None:
            started.set()
        replies = await asyncio.gather(*tasks, return_exceptions=True)
        if stopped:
            raise next((e for e in stopped if isinstance(e, EndpointDown)), stopped[0])
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply
        return [reply for reply in replies if isinstance(reply, Reply)]

    def _request(self, ask: Ask[Any], messages: list[dict[str, str]], reask: int) -> Request:
        pool = self._by_role[ask.role]
        # A re-ask samples with another seed: the same seed could give back the same unusable answer, and
        # since the seed is keyed, two re-asks with identical messages are still two requests.
        body = pool.first.body(ask, self.config.model_for(ask.role), self.seed + reask, messages)
        return Request(cache_key(pool.key_url, body, ask.sample_index), body)

    async def _answer(self, stage: str, ask: Ask[A], request: Request, cache: dict[str, dict[str, Any]]) -> Reply[A]:
        reply: Reply[A] = Reply(status="failed")
        for reask in range(MAX_REASKS + 1):
            key = request.key
            reply.keys.append(key)
            hit = cache.get(key) if reask == 0 else self.warehouse.cached([key]).get(key)
            if hit is not None:
                reply.cached += 1
                text, finish = hit["response"], hit["finish_reason"]
                reply.logprobs = json.loads(hit["logprobs"]) if hit.get("logprobs") else None
            elif self.config.cache_only:
                reply.status, reply.error = "failed", "not in the cache, and this run sends no request"
                reply.failure = "terminal"  # the same run asks the same cache
                return reply
            else:
                try:
                    (text, finish, reply.logprobs), route, attempts = await self._send_once(stage, ask, request)
                    reply.sent += attempts
                    if route is None:  # answered by the same request, under way for another ask
                        reply.cached += 1
                except GatewayFailure as failed:
                    reply.sent += failed.attempts
                    reply.status, reply.error, reply.failure = "failed", failed.reason, failed.failure
                    return reply
            reply.raw = text
            try:
                reply.value = parse_answer(text, ask.schema)
                reply.status, reply.error = "ok", None
            except ValueError as exc:
                reply.cut = finish == "length"
                cut = f" (the answer was cut off at max_tokens={ask.max_tokens})" if reply.cut else ""
                reply.status, reply.error = "parse_error", f"{exc}{cut}"
            if hit is None and route is not None:  # an endpoint that answers only unusable things is as down
                route.breaker.answered(reply.error)  # as one that does not answer
            if reply.status == "ok":
                return reply
            if reply.cut:  # re-asked at the same budget, the answer would run on again
                break
            messages = [
                *ask.prompt.messages,
                {"role": "assistant", "content": (text or "")[:4000]},
                {
                    "role": "user",
                    "content": f"That answer could not be used: {reply.error}. "
                    "Reply again with only the JSON object, complete and valid.",
                },
            ]
            request = self._request(ask, messages, reask + 1)
        reply.failure = "terminal"  # no usable answer after every re-ask
        return reply

    async def _send_once(self, stage: str, ask: Ask, request: Request) -> tuple[Answered, Route | None, int]:
        """``_send``, unless the same request (its cache key: identical asks, from two items) is under way for
        another ask: then that one's answer, with no route and no attempt, as a rerun would find it in the
        cache; or its failure, after the retries it made for both (with none of its attempts). Sent twice,
        the two answers could differ (a sampling server), and a rerun would give both asks whichever the
        cache holds first, another run than this one. If the other is cancelled, this one is sent. An answer that
        landed while this ask's chunk was looked up, its request no longer under way, is taken the same way."""
        key = request.key
        while (flying := self._flying.get(key)) is not None:
            other = await asyncio.shield(flying)  # cancelled, this ask must not cancel the other's
            if isinstance(other, GatewayFailure):
                raise GatewayFailure(other.reason, 0, other.failure)
            if other is not None:
                return other, None, 0
        if (landed := self._landed.get(key)) is not None:
            return landed, None, 0
        flying = asyncio.get_running_loop().create_future()
        self._flying[key] = flying
        ended: Answered | GatewayFailure | None = None
        try:
            text, finish, logprobs, route, attempts = await self._send(stage, ask, request)
            ended = (text, finish, logprobs)
            return ended, route, attempts
        except GatewayFailure as failed:
            ended = failed
            raise
        finally:
            del self._flying[key]
            flying.set_result(ended)
            if isinstance(ended, tuple):
                self._landed.landed(key, ended)

    async def _send(
        self, stage: str, ask: Ask, request: Request
    ) -> tuple[str | None, str | None, list[dict[str, Any]] | None, Route, int]:
        """Send with retries; every attempt becomes a row in llm_calls. Returns the answer, the route that gave it
        and the attempts made."""
        pool = self._by_role[ask.role]
        payload = canonical_request(request.body)  # serialized once: sent, stored and journalled as is
        (text, finish, logprobs, route), attempts = await self.retrying(
            pool,
            lambda attempt, since: self._attempt(stage, ask, request.key, request.body, payload, pool, attempt, since),
        )
        return text, finish, logprobs, route, attempts

    def pool(self, role: Role) -> Pool:
        """The endpoint (or pool of them) a role's requests go to."""
        return self._by_role[role]

    async def retrying(self, pool: Pool, attempt: Callable[[int, Since], Awaitable[T]]) -> tuple[T, int]:
        """``attempt(number, since)`` until it succeeds, under the endpoint's retry policy (``since`` tells how
        long the request has taken, for an attempt to keep within its deadline); its result and the number of
        attempts made. A request that fails for good raises ``GatewayFailure``.

        The first attempt runs outside tenacity: most requests succeed at once, and its bookkeeping costs
        more CPU than the request itself at thousands of requests a second."""
        endpoint, route = pool.endpoint, pool.first  # a pool's members share the endpoint's retry settings
        attempts = 1
        clock = self.clock
        since = Since(clock)
        try:
            try:
                return await attempt(attempts, since), attempts
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                if not is_transient(exc) or endpoint.max_attempts == 1:
                    raise
                wait = pause(exc, attempts)
                if since.elapsed() + wait > endpoint.deadline:
                    raise
                self._say_wait(route, exc, wait)
                await clock.sleep(wait)

            async for retry in AsyncRetrying(
                stop=stop_after_attempt(endpoint.max_attempts - 1) | PastDeadline(since, endpoint.deadline),
                wait=Backoff(before=1),
                sleep=clock.sleep,
                before_sleep=lambda state: self._say_wait(
                    route, state.outcome.exception() if state.outcome else None, state.upcoming_sleep
                ),
                retry=retry_if_exception(is_transient),
                reraise=True,
            ):
                with retry:
                    attempts += 1
                    return await attempt(attempts, since), attempts
        except openai.APIStatusError as exc:
            raise GatewayFailure(
                f"HTTP {exc.status_code}: {error_text(exc, pool.scrub)}", attempts, failure(exc)
            ) from None
        except openai.APIConnectionError as exc:
            raise GatewayFailure(
                f"{type(exc).__name__}: {error_text(exc, pool.scrub)}", attempts, failure(exc)
            ) from None
        raise AssertionError("unreachable")

    async def _attempt(
        self, stage: str, ask: Ask, key: str, body: dict[str, Any], payload: str, pool: Pool, attempt: int, since: Since
    ) -> tuple[str | None, str | None, list[dict[str, Any]] | None, Route]:
        """One attempt, its whole reply read within the endpoint's timeout and what is left of the request's
        deadline."""
        route = await pool.pick()
        await route.ready()
        record = {
            "call_id": f"{self._call_prefix}{next(self._calls):012x}",
            "key": key,
            "run_id": self.run_id,
            "stage": stage,
            "template": ask.prompt.template,
            "template_hash": ask.prompt.template_hash,
            "base_url": route.address,
            "model": body["model"],
            "request": body,
            "attempt": attempt,
        }
        route.breaker.check()
        estimate = len(payload) / 4  # prompt tokens, roughly: what rate limits and budgets reserve up front
        reserved = 0.0
        if self.budget is not None:
            reserved = self.budget.reserve(self._cost(body["model"], int(estimate), ask.max_tokens))
        await route.rate.acquire(estimate + ask.max_tokens)
        async with route.limit:
            started = time.perf_counter()
            try:
                raw = await route.chat(payload.encode(), since.window(pool.endpoint))
            except (openai.APIStatusError, openai.APIConnectionError) as exc:
                status = refused(route, exc, self.budget, reserved)
                self.warehouse.add_call(
                    CallRecord(
                        **record,
                        latency_ms=(time.perf_counter() - started) * 1000,
                        http_status=status,
                        error=f"{type(exc).__name__}: {error_text(exc, route.scrub)}",
                        failure=failure(exc),
                    ),
                    request_json=payload,
                )
                pool.failed(route, exc)
                raise
            latency = (time.perf_counter() - started) * 1000
            completion = decode_completion(raw.content)
            text, finish, prompt_tokens, completion_tokens, logprobs, _ = completion
            cost = self._cost(body["model"], prompt_tokens, completion_tokens)
            if self.budget is not None:
                self.budget.settle(reserved, cost)
            # journaled before its place is taken again: a run killed at any moment re-sends at most C requests
            self.warehouse.add_call(
                CallRecord(
                    **record,
                    response=text,
                    finish_reason=finish,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    latency_ms=latency,
                    cost=cost,
                    http_status=raw.status_code,
                    logprobs=logprobs,
                ),
                request_json=payload,
            )
        route.limit.succeeded()
        pool.succeeded(route)
        route.rate.observe(raw.headers)
        route.breaker.succeeded(completion.is_completion)
        # Replies come in bunches (a server answers the requests of one moment together), and the request each
        # freed place wakes runs only after every task already ready: two turns of the loop put those requests
        # ahead of the work on this bunch's answers up the stack (the stages' handling), so the places refill
        # at once rather than after the whole bunch is handled (bench/README.md, twelfth round).
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return text, finish, logprobs, route

    def _say_wait(self, route: Route, exc: BaseException | None, seconds: float) -> None:
        """A long wait the server asked for is said on the progress line, once per stretch of waiting."""
        now = self.clock.monotonic()
        if seconds >= NOTICE_WAIT and retry_after(exc) is not None and now >= self._quiet_until:
            self._quiet_until = now + seconds
            self.notify(f"{route.base_url} asked to wait {seconds:.0f} s before retrying (Retry-After); waiting")

    def _cost(self, model: str, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        return call_cost(self.config.prices, model, prompt_tokens, completion_tokens)

    async def _fetch_batch(self, stage: str, missing: dict[str, tuple[Ask, dict[str, Any]]]) -> int:
        """Answers for ``missing`` (cache key -> (ask, body)) through each route's Batch API, into the cache."""
        by_route: dict[int, tuple[Route, dict[str, tuple[Ask, dict[str, Any]]]]] = {}
        for key, (ask, body) in missing.items():
            route = self.route(ask.role)
            by_route.setdefault(id(route), (route, {}))[1][key] = (ask, body)
        ingested = 0
        for route, requests in by_route.values():
            ingested += await batch.fetch(
                self.warehouse,
                route,
                requests,
                run_id=self.run_id,
                stage=stage,
                prices=self.config.prices,
                poll_seconds=self.config.batch_poll_seconds,
            )
        return ingested


class GatewayFailure(Exception):
    """A request that failed for good: after its retries, or at once when its failure is not transient."""

    def __init__(self, reason: str, attempts: int, failure: Failure) -> None:
        super().__init__(reason)
        self.reason, self.attempts, self.failure = reason, attempts, failure
