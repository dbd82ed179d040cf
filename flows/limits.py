"""How many requests may be in flight: an additive-increase, multiplicative-decrease bound.

A burst of 429s halves the bound (once per cool-down, so one burst counts once); each run of successes as
long as the bound grows it by one, back up to the configured maximum.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType


class AdaptiveLimit:
    def __init__(self, maximum: int, *, cooldown: float = 1.0) -> None:
        self.maximum = maximum
        self.limit = maximum
        self.cooldown = cooldown
        self.in_flight = 0
        self.cuts = 0
        self._successes = 0
        self._last_cut = -float("inf")
        self._changed = asyncio.Condition()

    async def __aenter__(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < self.limit)
            self.in_flight += 1

    async def __aexit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        async with self._changed:
            self.in_flight -= 1
            self._changed.notify_all()

    def throttled(self) -> None:
        now = time.monotonic()
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
