"""The one place that decides whether a failed attempt is tried again, and after how long.

Connection trouble, timeouts, 408, 409, 429 and 5xx are transient; every other 4xx is the request's own
fault and is never retried, nor is a reply ifsynth refuses to read (``ReplyRejected``). The server's
``Retry-After`` (or ``retry-after-ms``) wins over backoff, capped at a minute: a server asking for more is
overloaded for longer than one request should wait, and the request's deadline decides.
"""

from __future__ import annotations

import email.utils
import random
import time
from typing import Any

from ifsynth.flows.llm import openai
from ifsynth.schemas.records import Failure

MAX_RETRY_AFTER = 60.0
MAX_BACKOFF = 20.0
RETRY_STATUSES = {408, 409, 429}


class ReplyRejected(Exception):
    """A reply refused before it is read: compressed against our ``Accept-Encoding: identity``, or larger than
    any answer can be. Raised by the client's response hook, it reaches the gateway as the cause of the SDK's
    connection error."""


def rejected(exc: BaseException) -> ReplyRejected | None:
    """The refusal behind an exception, if there is one."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ReplyRejected):
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def is_transient(exc: BaseException) -> bool:
    """The single retry decision: connection trouble, timeouts, 408/409/429 and 5xx; never other 4xx, nor a
    refused reply."""
    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return rejected(exc) is None
    if isinstance(exc, openai.APIStatusError):
        return is_transient_status(exc.status_code)
    return False


def is_transient_status(status: int) -> bool:
    return status in RETRY_STATUSES or status >= 500


def failure(exc: BaseException) -> Failure:
    """How a failed attempt is recorded: ``transient`` when it was worth retrying, else ``terminal``."""
    return "transient" if is_transient(exc) else "terminal"


def retry_after(exc: BaseException | None) -> float | None:
    """Seconds the server asked us to wait, from ``retry-after-ms`` or ``Retry-After`` (seconds or a date)."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, parsed.timestamp() - time.time())


def pause(exc: BaseException | None, attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt``: what the server asked (capped), else
    exponential backoff with jitter."""
    asked = retry_after(exc)
    if asked is not None:
        return min(asked, MAX_RETRY_AFTER)
    return min(MAX_BACKOFF, 2.0 ** (attempt - 1) + random.uniform(0, 1))


class Backoff:
    """Tenacity's wait, counting the attempts made before tenacity took over."""

    def __init__(self, before: int = 0) -> None:
        self.before = before

    def __call__(self, state: Any) -> float:
        return pause(state.outcome.exception() if state.outcome else None, state.attempt_number + self.before)
