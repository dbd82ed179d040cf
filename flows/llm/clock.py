"""The time the gateway waits by: retries' backoff, a pool member's rest, rate limits and batch polls.

Every wait goes through one ``Clock``, the real one unless a caller passes another: tests pass a clock that
moves only when the code under test sleeps, so backoff takes no time and the delays asked for can be read.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """``time.monotonic`` and ``asyncio.sleep``."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
