"""Answers that landed while a cache lookup was under way, kept until the asks that lookup answers have started.

A lookup sees the answers recorded before it began. An answer that lands during it is missing from what it
returns, and once its request is no longer under way, a twin ask in the chunk looked up (the same request,
from another item) would be sent again: with a sampling server, another answer, and a rerun would give both
asks whichever the cache holds first. Only those answers are kept, and only as long as a lookup that may have
missed them is open, so memory stays bounded by what lands during lookups, not by the run.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class Landed(Generic[T]):
    def __init__(self) -> None:
        self._ticks = itertools.count()
        self._open: set[int] = set()  # the tick each open lookup began at
        self._kept: dict[str, tuple[int, T]] = {}  # key -> the tick it landed at, and its answer
        self._order: deque[tuple[int, str]] = deque()

    @contextmanager
    def lookup(self) -> Iterator[None]:
        """Around a lookup and the start of the asks it answers (their check of ``get`` included)."""
        began = next(self._ticks)
        self._open.add(began)
        try:
            yield
        finally:
            self._open.discard(began)
            oldest = min(self._open, default=None)
            while self._order and (oldest is None or self._order[0][0] < oldest):
                tick, key = self._order.popleft()
                if self._kept[key][0] == tick:  # not since landed again, for a later lookup
                    del self._kept[key]

    def landed(self, key: str, answer: T) -> None:
        """An answer recorded in the warehouse: kept if a lookup under way may have missed it."""
        if self._open:
            tick = next(self._ticks)
            self._kept[key] = (tick, answer)
            self._order.append((tick, key))

    def __len__(self) -> int:
        """How many answers are kept."""
        return len(self._kept)

    def get(self, key: str) -> T | None:
        kept = self._kept.get(key)
        return None if kept is None else kept[1]
