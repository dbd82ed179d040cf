"""How hard the gateway may push an endpoint, and how much a run may spend.

``AdaptiveLimit``: how many requests may be in flight, an additive-increase, multiplicative-decrease bound.

A burst of 429s halves the bound (once per cool-down, so one burst counts once); each run of successes as
long as the bound grows it by one, back up to the configured maximum. Waiters are woken one at a time, in
order: waking all of them on every release costs O(concurrency) per request. A waiter of higher ``PRIORITY``
goes first: stages that run together favour the later one, whose answers finish what is already begun.

``RateLimit``: requests and tokens per minute (token buckets), from config and ``x-ratelimit-*`` headers.
``Budget``: ``--max-calls`` and ``--max-cost``, reserved before each request is sent.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Mapping
from contextvars import ContextVar
from types import TracebackType

from ifsynth.flows.llm.clock import SYSTEM_CLOCK, Clock
from ifsynth.schemas.errors import BudgetExhausted

# the priority of the requests the current task makes: higher ones take a free place first
PRIORITY: ContextVar[int] = ContextVar("ifsynth_request_priority", default=0)


class AdaptiveLimit:
    def __init__(self, maximum: int, *, cooldown: float = 1.0, clock: Clock = SYSTEM_CLOCK) -> None:
        self.maximum = maximum
        self.limit = maximum
        self.cooldown = cooldown
        self.in_flight = 0
        self.cuts = 0
        self._clock = clock
        self._successes = 0
        self._last_cut = -float("inf")
        self._waiters: dict[int, deque[asyncio.Future[None]]] = {}  # by priority
        self._queued = 0

    async def __aenter__(self) -> None:
        if self.in_flight < self.limit and not self._queued:
            self.in_flight += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        queue = self._waiters.get(PRIORITY.get())
        if queue is None:
            queue = self._waiters[PRIORITY.get()] = deque()
            self._waiters = dict(sorted(self._waiters.items(), reverse=True))  # highest first
        queue.append(waiter)
        self._queued += 1
        try:
            await waiter  # the releaser counted us in before waking us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # woken and cancelled at once: pass the slot on
            elif waiter in queue:  # a cancelled waiter may already have been passed over by _wake
                queue.remove(waiter)
                self._queued -= 1
            raise

    async def __aexit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._release()

    def _release(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        for queue in self._waiters.values():
            while queue and self.in_flight < self.limit:
                waiter = queue.popleft()
                self._queued -= 1
                if not waiter.done():
                    self.in_flight += 1
                    waiter.set_result(None)

    def throttled(self) -> None:
        now = self._clock.monotonic()
        if now - self._last_cut >= self.cooldown:
            self.limit = max(1, self.limit // 2)
            self._last_cut = now
            self._successes = 0
            self.cuts += 1

    def succeeded(self) -> None:
        if self.limit >= self.maximum:
            return
        self._successes += 1
        if self._successes >= self.limit:
            self._successes = 0
            self.limit += 1
            self._wake()


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_reset(value: str | None) -> float | None:
    """OpenAI's ``x-ratelimit-reset-*`` durations (``1s``, ``6m0s``, ``120ms``) in seconds."""
    if not value:
        return None
    parts = _DURATION.findall(value.strip())
    if not parts:
        try:
            return float(value)
        except ValueError:
            return None
    return sum(float(number) * _UNIT[unit] for number, unit in parts)


class Bucket:
    """A token bucket of ``capacity`` per minute, refilled continuously; the server's headers correct it."""

    def __init__(self, capacity: float, clock: Clock) -> None:
        self.capacity = capacity
        self.level = capacity
        self._clock = clock
        self._at = clock.monotonic()

    def _refill(self) -> None:
        now = self._clock.monotonic()
        self.level = min(self.capacity, self.level + (now - self._at) * self.capacity / 60.0)
        self._at = now

    def delay(self, amount: float) -> float:
        """Seconds until ``amount`` fits (an amount above capacity waits for a full bucket)."""
        self._refill()
        missing = min(amount, self.capacity) - self.level
        return max(0.0, missing * 60.0 / self.capacity)

    def take(self, amount: float) -> None:
        self._refill()
        self.level -= amount

    def observe(self, limit: float | None, remaining: float | None, reset: float | None) -> None:
        """Adopt the server's view where it is stricter: its limit, its remaining count, and when nothing
        remains, its reset time (the next request then waits exactly that long)."""
        self._refill()
        if limit is not None and limit > 0:
            self.capacity = min(self.capacity, limit)
            self.level = min(self.level, self.capacity)
        if remaining is not None:
            self.level = min(self.level, remaining)
            if remaining < 1 and reset is not None:
                self.level = min(self.level, 1 - reset * self.capacity / 60.0)


class RateLimit:
    """Requests- and tokens-per-minute budgets of one endpoint, from its config and its ``x-ratelimit-*``
    headers. A request waits until both buckets hold what it needs; tokens are estimated as prompt
    characters / 4 plus ``max_tokens``, which is what OpenAI counts against the limit up front."""

    def __init__(self, rpm: float | None = None, tpm: float | None = None, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self.requests = Bucket(rpm, clock) if rpm else None
        self.tokens = Bucket(tpm, clock) if tpm else None
        self.waited = 0.0

    def delay(self, tokens: float) -> float:
        return max(
            self.requests.delay(1) if self.requests else 0.0,
            self.tokens.delay(tokens) if self.tokens else 0.0,
        )

    async def acquire(self, tokens: float) -> None:
        while (wait := self.delay(tokens)) > 0:
            self.waited += wait
            await self._clock.sleep(wait)
        if self.requests:
            self.requests.take(1)
        if self.tokens:
            self.tokens.take(tokens)

    def observe(self, headers: Mapping[str, str]) -> None:
        """Learn the server's limits from a response's headers; absent headers change nothing."""
        for kind in ("requests", "tokens"):
            limit = _number(headers.get(f"x-ratelimit-limit-{kind}"))
            remaining = _number(headers.get(f"x-ratelimit-remaining-{kind}"))
            if limit is None and remaining is None:
                continue
            bucket = getattr(self, kind)
            if bucket is None:
                if limit is None:
                    continue
                bucket = Bucket(limit, self._clock)
                setattr(self, kind, bucket)
            bucket.observe(limit, remaining, parse_reset(headers.get(f"x-ratelimit-reset-{kind}")))


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class Budget:
    """``--max-calls`` and ``--max-cost`` for one invocation: every request reserves its call and its
    worst-case cost (prompt characters / 4 and ``max_tokens`` at the model's price) before it is sent, and
    settles at the actual cost, so in-flight requests can never take the run past either limit."""

    def __init__(self, max_calls: int | None = None, max_cost: float | None = None) -> None:
        self.max_calls, self.max_cost = max_calls, max_cost
        self.calls = 0
        self.cost = 0.0

    def reserve(self, cost: float | None) -> float:
        """Count one request of at most ``cost`` dollars, or raise BudgetExhausted; returns the reservation."""
        if self.max_calls is not None and self.calls + 1 > self.max_calls:
            raise BudgetExhausted(
                f"stopped: budget of {self.max_calls} calls reached; run the same command again to continue "
                "(cached answers are free), or raise --max-calls"
            )
        reserved = cost or 0.0
        if self.max_cost is not None:
            if cost is None:
                raise BudgetExhausted("--max-cost needs a price for the model: set prices.<model>.input/output")
            if self.cost + reserved > self.max_cost + 1e-12:
                raise BudgetExhausted(
                    f"stopped: budget of ${self.max_cost:g} reached (${self.cost:.4f} spent); run the same command "
                    "again to continue (cached answers are free), or raise --max-cost"
                )
        self.calls += 1
        self.cost += reserved
        return reserved

    def settle(self, reserved: float, actual: float | None) -> None:
        """Replace a reservation by the actual cost, when the endpoint reported usage."""
        if actual is not None:
            self.cost += actual - reserved
