"""The gateway's one retry decision and its waits, on the SDK's own exception types."""

from __future__ import annotations

import email.utils
import time

import httpx2
import openai
import pytest

from ifsynth.flows.llm.retry import MAX_BACKOFF, MAX_RETRY_AFTER, is_transient, pause, retry_after

REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def status_error(status: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
    response = httpx2.Response(status, headers=headers or {}, request=REQUEST)
    return openai.APIStatusError("boom", response=response, body=None)


@pytest.mark.parametrize(("status", "transient"), [
    (400, False), (401, False), (403, False), (404, False), (422, False),
    (408, True), (409, True), (429, True), (500, True), (502, True), (503, True),
])  # fmt: skip
def test_only_timeouts_conflicts_rate_limits_and_server_errors_are_retried(status: int, transient: bool) -> None:
    assert is_transient(status_error(status)) is transient


def test_connection_trouble_is_retried_and_other_errors_are_not() -> None:
    assert is_transient(openai.APIConnectionError(request=REQUEST))
    assert is_transient(openai.APITimeoutError(request=REQUEST))
    assert not is_transient(ValueError("not an API error"))


def test_retry_after_reads_milliseconds_seconds_and_dates() -> None:
    assert retry_after(status_error(429, {"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    assert retry_after(status_error(429, {"retry-after": "7"})) == 7.0
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (retry_after(status_error(429, {"retry-after": soon})) or 0) <= 31
    assert retry_after(status_error(429, {"retry-after": "whenever"})) is None
    assert retry_after(status_error(429)) is None
    assert retry_after(ValueError("no response")) is None


def test_the_server_is_obeyed_up_to_a_cap_else_backoff_grows_with_jitter() -> None:
    assert pause(status_error(429, {"retry-after": "3"}), attempt=5) == 3.0
    assert pause(status_error(429, {"retry-after": "100000"}), attempt=1) == MAX_RETRY_AFTER
    first, third = pause(None, attempt=1), pause(None, attempt=3)
    assert 1.0 <= first <= 2.0 and 4.0 <= third <= 5.0
    assert pause(None, attempt=30) == MAX_BACKOFF


def test_the_breaker_trips_at_once_on_the_key_and_after_a_streak_of_400s() -> None:
    from ifsynth.flows.llm.breaker import REQUEST_STREAK, Breaker
    from ifsynth.schemas.errors import EndpointDown

    breaker = Breaker("http://e/v1", "check the key in MY_KEY", scrub=lambda text: text.replace("sk-1", "***"))
    with pytest.raises(EndpointDown, match="answered 401: check the key in MY_KEY"):
        breaker.failed(status_error(401))
    with pytest.raises(EndpointDown):
        breaker.check()  # nothing more goes out
    streak = Breaker("http://e/v1", "K")
    for _ in range(REQUEST_STREAK - 1):
        streak.failed(status_error(400))
    streak.succeeded()  # one answer in between starts the count again
    for _ in range(REQUEST_STREAK - 1):
        streak.failed(status_error(400))
    with pytest.raises(EndpointDown, match=f"answered 400 to {REQUEST_STREAK} requests in a row"):
        streak.failed(status_error(400))
    Breaker("http://e/v1", "K").failed(status_error(500))  # does not raise: a 5xx is the retries' business
