"""The root of ifsynth's exceptions. Every error a user can cause derives from it, so the CLI can turn
it into one line and an exit code instead of a stack trace."""

from __future__ import annotations


class IfsynthError(Exception):
    """An error with a message that says what went wrong and what to do next."""

    exit_code: int = 1


class LogprobsUnsupported(IfsynthError):
    """Token log-probabilities were asked of an endpoint that cannot give them."""

    exit_code = 2


class BatchFailed(IfsynthError):
    """The endpoint ended a batch without answers."""
