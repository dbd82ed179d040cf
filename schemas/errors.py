"""Every error a user can cause, in one tree, so the CLI turns any of them into one line and an exit code.

    IfsynthError                            exit 1 unless noted; the message says what to do next
    ├── ConfigError            [terminal]   exit 2  settings that cannot work (flags, --set, a config file)
    ├── PromptError            [terminal]           a template missing, unreadable or failing to render
    ├── SeedError              [terminal]           a seed source that cannot be read
    ├── LocalModelUnavailable  [terminal]           the embedded model cannot run: extra, weights or GGUF file
    ├── StageFailed            [terminal]           a stage's own code failed on an item, named in one line
    ├── BudgetExhausted                     exit 3  --max-calls or --max-cost reached; the same command continues
    ├── EndpointDown                        exit 4  an endpoint that cannot serve the run; it stops early
    ├── RunFailed              [transient]  exit 5  more asks failed than max_failure_share; a rerun retries them
    ├── BatchFailed            [transient]          the endpoint ended a batch without answers; rerun submits anew
    ├── PushFailed                                  the Hub refused an upload, or no token was found
    ├── RunInterrupted                      128+sig a run stopped by a signal; the same command continues
    └── WarehouseError                              the DuckDB file, or what is asked of it
        ├── WarehouseInUse     [transient]          another process holds the write lock
        ├── UnknownRun         [terminal]           no such run (or no run yet)
        ├── UnknownItem        [terminal]           no such item
        ├── UnknownRelease     [terminal]           no such release
        └── ImportFailed       [terminal]           a folder that cannot be read as the format asked for
    TransientError                                  mixin: the same command, run again later, may succeed
    TerminalError                                   mixin: something must change first (input, settings, code)
    KeyboardInterrupt
    └── Interrupted                                 a signal (Ctrl-C, SIGTERM) inside a run; becomes RunInterrupted

``[transient]`` and ``[terminal]`` mark the classes that carry the mixin; an unmarked one can be either
(EndpointDown: a refused key or a port nobody listens on; PushFailed: no token or the Hub's 5xx).
``tests/test_errors.py`` holds this drawing to the classes. Transient failures of one request (429, 5xx,
timeouts, connection errors) never surface here: the gateway retries them (``flows/llm/retry.py``) and
records, per failed reply and per attempt, whether what still failed was transient or terminal.
"""

from __future__ import annotations


class IfsynthError(Exception):
    """An error with a message that says what went wrong and what to do next."""

    exit_code: int = 1


class TransientError(Exception):
    """Mixin: the cause may pass by itself (a lock, a flaky endpoint), so the same command may succeed later."""


class TerminalError(Exception):
    """Mixin: running again changes nothing until the input, the settings or the code does."""


class ConfigError(IfsynthError, TerminalError):
    """A run was asked for with settings that cannot work."""

    exit_code = 2


class PromptError(IfsynthError, TerminalError):
    """A template that is missing, unreadable, or fails to render."""

    exit_code = 2  # the command's input, as its flags are


class SeedError(IfsynthError, TerminalError):
    """A seed source cannot be read."""

    exit_code = 2


class LocalModelUnavailable(IfsynthError, TerminalError):
    """The embedded local model cannot run: llama.cpp or the weights are not installed, or a GGUF file is bad."""


class BudgetExhausted(IfsynthError):
    """The run stopped before a request that would have gone past --max-calls or --max-cost."""

    exit_code = 3


class EndpointDown(IfsynthError):
    """An endpoint that cannot serve the run (refused, unauthorised, unknown model, every request rejected):
    the run stops early instead of failing request after request."""

    exit_code = 4


class RunFailed(IfsynthError, TransientError):
    """A run that ended with more failed requests than it may have (``max_failure_share``)."""

    exit_code = 5


class BatchFailed(IfsynthError, TransientError):
    """The endpoint ended a batch without answers."""


class StageFailed(IfsynthError, TerminalError):
    """A stage's own code (not the endpoint, not the input) failed: one line names the stage, the run and the
    item it was on, and the error; ``--debug`` shows the traceback, which is chained to this one."""

    def __init__(self, stage: str, run_id: str, item_id: str | None, error: BaseException) -> None:
        self.stage, self.run_id, self.item_id = stage, run_id, item_id
        on = f" on item `{item_id}`" if item_id else ""
        what = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        super().__init__(f"stage `{stage}` of run `{run_id}` failed{on}: {what} (--debug shows the traceback)")


class PushFailed(IfsynthError):
    """The Hub refused the upload, or no token was found."""


class WarehouseError(IfsynthError):
    """The warehouse file, or what was asked of it."""


class WarehouseInUse(WarehouseError, TransientError):
    def __init__(self, path: str, holder: str) -> None:
        self.path, self.holder = path, holder
        super().__init__(
            f"warehouse `{path}` is in use by another process ({holder}); wait for it to finish "
            "or pass --warehouse with another file"
        )


class UnknownRun(WarehouseError, TerminalError):
    def __init__(self, run: str | None) -> None:
        self.run = run
        what = f"no run `{run}`" if run else "no runs yet"
        super().__init__(f"{what} in this warehouse; `ifsynth runs` lists the runs")


class UnknownItem(WarehouseError, TerminalError):
    def __init__(self, item: str) -> None:
        self.item = item
        super().__init__(f"no item `{item}` in this warehouse; `ifsynth audit` lists items of a run")


class UnknownRelease(WarehouseError, TerminalError):
    def __init__(self, release: str) -> None:
        self.release = release
        super().__init__(
            f"no release `{release}`; a run makes one when it completes (`ifsynth runs`), "
            "`ifsynth import` reads a published one"
        )


class ImportFailed(WarehouseError, TerminalError):
    """A folder that cannot be read as the format asked for."""

    exit_code = 2  # the command's input


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
