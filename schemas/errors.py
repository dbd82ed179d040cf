"""Every error a user can cause, in one tree, so the CLI turns any of them into one line and an exit code.

    IfsynthError                      exit 1 unless noted; the message says what to do next
    ├── ConfigError                   exit 2  settings that cannot work (flags, --set, a config file)
    ├── PromptError                           a template missing, unreadable or failing to render
    ├── SeedError                             a seed source that cannot be read
    ├── LocalModelUnavailable                 the embedded model cannot run: extra, weights or GGUF file
    ├── BudgetExhausted               exit 3  --max-calls or --max-cost reached; the same command continues
    ├── BatchFailed                           the endpoint ended a batch without answers; rerun submits anew
    └── WarehouseError                        the DuckDB file, or what is asked of it
        ├── WarehouseInUse                    another process holds the write lock
        ├── UnknownRun                        no such run (or no run yet)
        ├── UnknownItem                       no such item
        ├── UnknownRelease                    no such release
        └── ImportFailed                      a folder that cannot be read as the format asked for

All of them are terminal: fixing the input, not retrying, cures them (BudgetExhausted and BatchFailed say
which command continues). Transient failures of an endpoint (429, 5xx, timeouts, connection errors) never
surface here: the gateway retries them (``flows/llm/retry.py``) and records what still failed as a verdict.
"""

from __future__ import annotations


class IfsynthError(Exception):
    """An error with a message that says what went wrong and what to do next."""

    exit_code: int = 1


class ConfigError(IfsynthError):
    """A run was asked for with settings that cannot work."""

    exit_code = 2


class PromptError(IfsynthError):
    """A template that is missing, unreadable, or fails to render."""


class SeedError(IfsynthError):
    """A seed source cannot be read."""


class LocalModelUnavailable(IfsynthError):
    """The embedded local model cannot run: llama.cpp or the weights are not installed, or a GGUF file is bad."""


class BudgetExhausted(IfsynthError):
    """The run stopped before a request that would have gone past --max-calls or --max-cost."""

    exit_code = 3


class EndpointDown(IfsynthError):
    """An endpoint that cannot serve the run (refused, unauthorised, unknown model, every request rejected):
    the run stops early instead of failing request after request."""

    exit_code = 4


class RunFailed(IfsynthError):
    """A run that ended with more failed requests than it may have (``max_failure_share``)."""

    exit_code = 5


class BatchFailed(IfsynthError):
    """The endpoint ended a batch without answers."""


class WarehouseError(IfsynthError):
    """The warehouse file, or what was asked of it."""


class WarehouseInUse(WarehouseError):
    def __init__(self, path: str, holder: str) -> None:
        self.path, self.holder = path, holder
        super().__init__(
            f"warehouse `{path}` is in use by another process ({holder}); wait for it to finish "
            "or pass --warehouse with another file"
        )


class UnknownRun(WarehouseError):
    def __init__(self, run: str | None) -> None:
        self.run = run
        what = f"no run `{run}`" if run else "no runs yet"
        super().__init__(f"{what} in this warehouse; `ifsynth runs` lists the runs")


class UnknownItem(WarehouseError):
    def __init__(self, item: str) -> None:
        self.item = item
        super().__init__(f"no item `{item}` in this warehouse; `ifsynth audit` lists items of a run")


class UnknownRelease(WarehouseError):
    def __init__(self, release: str) -> None:
        self.release = release
        super().__init__(
            f"no release `{release}`; a run makes one when it completes (`ifsynth runs`), "
            "`ifsynth import` reads a published one"
        )


class ImportFailed(WarehouseError):
    """A folder that cannot be read as the format asked for."""


class RunInterrupted(IfsynthError):
    """How an interrupted run reaches the command line: a clean stop, said in one line, exit 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__("interrupted; run the same command again to continue from where it stopped")
        self.exit_code = 128 + signum


class Interrupted(KeyboardInterrupt):
    """A stop asked for by a signal (Ctrl-C, SIGTERM): the run ends ``interrupted`` and exits 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
