"""The secrets this process was given (endpoint keys, credentials in base URLs), kept out of whatever it says or
records besides the requests themselves.

Error texts are scrubbed where they are made: each route knows its own secrets (``Route.scrub``). This is the
net under them, for texts made where no route is at hand: every log record, with its traceback (Prefect sends
them to its server, which shows them in its UI), a run's recorded failure and the line a command prints for an
error nobody expected. A server may echo the key it was sent into its error, and a library may chain that
error under another, so it is the texts that are scrubbed, not the errors chosen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

_known: list[str] = []  # longest first: a secret that holds a shorter one is replaced whole


SHORTEST = 8  # shorter, a placeholder key (`EMPTY`, `ollama`) would be cut out of every word that holds it


def remember(secrets: Iterable[str]) -> None:
    """Scrub ``secrets`` from this process's log records and unexpected errors from now on (those of at least
    SHORTEST characters: a real key is far longer; the route that sent one scrubs its own error texts of it
    whatever its length)."""
    new = {secret for secret in secrets if len(secret) >= SHORTEST} - set(_known)
    if not new:
        return
    _known[:] = sorted({*_known, *new}, key=len, reverse=True)
    made = logging.getLogRecordFactory()
    if not isinstance(made, _Scrubbing):  # once a secret is known: a process that has none pays nothing
        logging.setLogRecordFactory(_Scrubbing(made))


def scrubbed(text: str) -> str:
    """``text`` with every remembered secret replaced."""
    for secret in _known:
        text = text.replace(secret, "***")
    return text


class _Scrubbing:
    """Makes log records whose message, traceback and stack carry no secret. A traceback that holds one is
    formatted here, as a standard formatter would print it, and kept as text only: a handler formats it as it
    emits, past where a filter of ours runs, and some (rich's) render the exception object itself."""

    def __init__(self, made: Callable[..., logging.LogRecord]) -> None:
        self.made = made

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.made(*args, **kwargs)
        malformed = False
        try:
            message = record.getMessage()
        except Exception:  # a handler would fail on it too, and print its arguments and the error handled
            message, malformed = f"{record.msg!s} {record.args!r}", True
        clean = scrubbed(message)
        if malformed or clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[0] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            if scrubbed(text) != text:
                record.exc_text, record.exc_info = scrubbed(text), None
        if record.stack_info:
            record.stack_info = scrubbed(record.stack_info)
        return record
