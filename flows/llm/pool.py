"""The endpoints a role's requests spread over: one, or a pool of interchangeable servers (several vLLM
replicas of one model, say).

Each attempt goes to the member with the most free capacity for its weight (a member's concurrency is the
endpoint's ``concurrency`` times its weight). A member that refuses connections, or answers 5xx
``STRIKES`` times in a row, leaves the rotation for ``REST`` seconds (doubling while it keeps failing, up to
``MAX_REST``), and its requests are retried on the others; it is then tried again. When every member has
rested ``GIVE_UP`` times in a row, the run stops as it does when a single endpoint is down. Failures that say the
configuration is wrong (401, 404, a redirect) still trip that member's breaker and stop the run, as for a
single endpoint.

A pool's requests are keyed as the pool's, not the member's (``POOL_KEY``): the model and the parameters
decide an answer, so a rerun against other members, or another pool, is served from the cache.
"""

from __future__ import annotations

from collections.abc import Callable

from ifsynth.flows.llm import openai
from ifsynth.flows.llm.clock import SYSTEM_CLOCK, Clock
from ifsynth.flows.llm.retry import rejected
from ifsynth.flows.llm.route import Route
from ifsynth.schemas.config import Endpoint
from ifsynth.schemas.errors import EndpointDown

POOL_KEY = "pool"  # the endpoint part of a pooled request's cache key
STRIKES = 3  # 5xx answers in a row that take a member out
REST, MAX_REST = 5.0, 120.0  # seconds out of rotation, first and at most
GIVE_UP = 3  # rests in a row of every member, with no answer between, that stop the run


class Pool:
    def __init__(
        self,
        endpoint: Endpoint,
        notify: Callable[[str], None] = lambda _: None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.endpoint = endpoint
        self.notify = notify
        self._clock = clock
        members = endpoint.members
        if len(members) <= 1:
            self.routes = [Route(endpoint, notify, clock)]
            self.weights = [1.0]
        else:
            self.routes = [
                Route(
                    endpoint.model_copy(
                        update={
                            "base_url": member.base_url,
                            "members": (),
                            "concurrency": max(1, round(endpoint.concurrency * member.weight)),
                        }
                    ),
                    notify,
                    clock,
                )
                for member in members
            ]
            self.weights = [member.weight for member in members]
        self.pooled = len(self.routes) > 1
        self.key_url = POOL_KEY if self.pooled else self.routes[0].base_url
        self._back_at = [0.0] * len(self.routes)  # when each member rejoins the rotation
        self._rests = [0] * len(self.routes)  # times each was taken out since it last answered
        self._strikes = [0] * len(self.routes)

    @property
    def first(self) -> Route:
        """The route whose settings (structured-output style, schema dialect) every member shares."""
        return self.routes[0]

    @property
    def capacity(self) -> int:
        return sum(route.limit.maximum for route in self.routes)

    async def pick(self) -> Route:
        """The member the next attempt goes to: of those in rotation, the one with the most free capacity for
        its weight; when none is, the first to come back, once it may."""
        if not self.pooled:
            return self.first
        now = self._clock.monotonic()
        present = [at for at, back in enumerate(self._back_at) if back <= now]
        if not present:
            if min(self._rests) >= GIVE_UP:
                members = ", ".join(route.base_url for route in self.routes)
                raise EndpointDown(
                    f"no member of the pool answers ({members}: each out of rotation {GIVE_UP} times in a row); "
                    "the run stopped, and continues when rerun"
                )
            soonest = min(range(len(self.routes)), key=self._back_at.__getitem__)
            await self._clock.sleep(max(0.0, self._back_at[soonest] - now))
            return self.routes[soonest]
        return self.routes[max(present, key=self._room)]

    def _room(self, at: int) -> float:
        limit = self.routes[at].limit
        return (limit.limit - limit.in_flight) / self.weights[at]

    def succeeded(self, route: Route) -> None:
        if self.pooled:
            at = self.routes.index(route)
            self._strikes[at] = self._rests[at] = 0

    def failed(self, route: Route, exc: BaseException) -> None:
        """After a failed attempt: a pool member that cannot serve rests; anything else is its breaker's."""
        if self.pooled:
            at = self.routes.index(route)
            refused = (
                isinstance(exc, openai.APIConnectionError)
                and not isinstance(exc, openai.APITimeoutError)
                and rejected(exc) is None  # a reply ifsynth refused came from a server that answers
            )
            server = isinstance(exc, openai.APIStatusError) and exc.status_code >= 500
            if refused or server:
                self._strikes[at] += 1
                if refused or self._strikes[at] >= STRIKES:
                    self._rest(at, "cannot be reached" if refused else f"answered {STRIKES} 5xx in a row")
                return
        route.breaker.failed(exc)

    def _rest(self, at: int, why: str) -> None:
        now = self._clock.monotonic()
        if self._back_at[at] > now:
            return  # already resting: requests that were in flight when it went failed too
        seconds = min(MAX_REST, REST * 2 ** self._rests[at])
        self._rests[at] += 1
        self._strikes[at] = 0
        self._back_at[at] = now + seconds
        others = "the others" if len(self.routes) > 2 else "the other"
        where = self.routes[at].base_url
        self.notify(f"{where} {why}: out of rotation for {seconds:.0f} s, its requests go to {others}")

    def scrub(self, text: str) -> str:
        """``text`` without any member's secrets: a failure seen after retries may come from any of them."""
        for route in self.routes:
            text = route.scrub(text)
        return text

    async def close(self) -> None:
        for route in self.routes:
            await route.close()
