"""The circuit breaker of an endpoint: a run stops early, in one line, when its endpoint cannot serve it.

Some failures say the whole endpoint is wrong, not one request: a refused connection or an unknown host
before any answer, 401 and 403 (the key), 404 (the model or the path), a redirect (the base URL). One is
enough. Others are only telling in a row: a 400 for every request (a parameter the server does not take,
every prompt over the context length), or replies that are not chat completions at all (an HTML page, a
proxy's error), or answers that cannot be used (prose, JSON that does not fit the schema, empty content). A
success in between resets those counts; so does any success for a lost connection, which
then has to recur ``CONNECTION_STREAK`` times in a row (the server went away mid-run).
"""

from __future__ import annotations

from collections.abc import Callable

from ifsynth.flows.llm import openai
from ifsynth.flows.llm.retry import rejected
from ifsynth.schemas.errors import EndpointDown

REQUEST_STREAK = 10  # 400s, replies that are not completions, or answers that cannot be used, in a row
CONNECTION_STREAK = 20  # refused connections in a row after the endpoint has answered once


class Breaker:
    def __init__(self, base_url: str, key_advice: str, scrub: Callable[[str], str] = str) -> None:
        """``key_advice``: what a 401 or 403 asks of the user (``route.key_advice``)."""
        self.base_url = base_url
        self.scrub = scrub
        self.key_advice = key_advice
        self.tripped: EndpointDown | None = None
        self._answered = False
        self._streaks = {"400": 0, "not a completion": 0, "connection": 0, "unusable": 0}

    def check(self) -> None:
        """Before a request: once tripped, nothing more goes to this endpoint."""
        if self.tripped is not None:
            raise self.tripped

    def succeeded(self, completion: bool = True) -> None:
        self._answered = True
        self._streaks["400"] = self._streaks["connection"] = 0
        if completion:
            self._streaks["not a completion"] = 0
        else:
            self._count("not a completion", REQUEST_STREAK, "replied with something that is not a chat completion")

    def answered(self, unusable: str | None) -> None:
        """After an answer was read: ``unusable`` is why it could not be used (None: it could)."""
        if unusable is None:
            self._streaks["unusable"] = 0
            return
        said = self.scrub(" ".join(unusable.split()))[:160]
        self._count("unusable", REQUEST_STREAK, f"gave {REQUEST_STREAK} answers in a row that cannot be used ({said})")

    def failed(self, exc: BaseException) -> None:
        """After a failed attempt: trips (and raises) when the failure condemns the endpoint."""
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if status in (401, 403):
                self._trip(f"answered {status}: {self.key_advice}")
            if status == 404:
                self._trip("answered 404: check the model name (--model, --judge-model) and the base URL's path")
            if 300 <= status < 400:
                where = exc.response.headers.get("location", "elsewhere")
                self._trip(f"redirected ({status}) to {where}: give the final URL as --base-url")
            if status == 400:
                self._count(
                    "400", REQUEST_STREAK, f"answered 400 to {REQUEST_STREAK} requests in a row ({self._said(exc)})"
                )
            return
        refusal = rejected(exc)
        if refusal is not None:
            self._count("not a completion", REQUEST_STREAK, f"sent replies ifsynth refuses ({refusal})")
            return
        if isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError):
            if not self._answered:
                self._trip(f"cannot be reached ({self._said(exc)}): check that URL and that the server is up")
            self._count("connection", CONNECTION_STREAK, f"stopped answering ({self._said(exc)})")

    def _count(self, kind: str, streak: int, why: str) -> None:
        self._streaks[kind] += 1
        if self._streaks[kind] >= streak:
            self._trip(why)

    def _trip(self, why: str) -> None:
        self.tripped = EndpointDown(f"endpoint {self.base_url} {why}; the run stopped, and continues when rerun")
        raise self.tripped from None  # not chained to the failure that tripped it: its text may echo the key

    def _said(self, exc: BaseException) -> str:
        return self.scrub(" ".join(str(exc).split()))[:160]
