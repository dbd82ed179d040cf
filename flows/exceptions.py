"""Errors raised by ifsynth's flows. Each carries a one-line message that says what to do next."""

from __future__ import annotations

from ifsynth.schemas.errors import IfsynthError


class LocalModelUnavailable(IfsynthError):
    """The embedded local model cannot run: its optional dependencies or its weights are not installed."""


class ConfigError(IfsynthError):
    """A run was asked for with settings that cannot work."""

    exit_code = 2


class SeedError(IfsynthError):
    """A seed source cannot be read."""


class BudgetExhausted(IfsynthError):
    """The run stopped before a request that would have gone past --max-calls or --max-cost."""

    exit_code = 3
