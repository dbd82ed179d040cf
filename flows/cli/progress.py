"""Progress on stderr, fed by the stages through the Progress protocol: a bar per stage on a terminal (done and
total, rate, time left, elapsed), one line per stage and a line every half minute otherwise (a log file, a
scheduler's output), so a long run shows it is alive wherever it is watched."""

from __future__ import annotations

import time
from typing import Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ifsynth.schemas.records import StageCounts

EVERY = 30.0  # seconds between two lines of a stage in progress, off a terminal


def progress_for(console: Console) -> RichProgress | PlainProgress:
    return RichProgress(console) if console.is_terminal else PlainProgress(console)


class RichProgress:
    def __init__(self, console: Console) -> None:
        self._bars = Progress(
            TextColumn("{task.description:<18}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>9}"),
            TimeRemainingColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> Self:
        self._bars.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._bars.stop()

    def note(self, message: str) -> None:
        self._bars.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def start(self, stage: str, total: int) -> None:
        if stage in self._tasks:
            self._bars.reset(self._tasks[stage], total=total, rate="")
        else:
            self._tasks[stage] = self._bars.add_task(stage, total=total, rate="")

    def advance(self, stage: str, n: int = 1) -> None:
        task = self._tasks[stage]
        self._bars.advance(task, n)
        speed = self._bars.tasks[task].speed
        if speed:
            self._bars.update(task, rate=f"{speed:.1f}/s")

    def finish(self, stage: str, counts: StageCounts) -> None:
        task = self._tasks[stage]
        self._bars.update(task, completed=counts.n_in, total=counts.n_in)


class PlainProgress:
    """Lines instead of bars: a stage's start, a line every EVERY seconds while it runs, and its end."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._stage: str | None = None
        self._done = self._total = 0
        self._began = self._said = 0.0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def note(self, message: str) -> None:
        self.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def start(self, stage: str, total: int) -> None:
        self._stage, self._done, self._total = stage, 0, total
        self._began = self._said = time.monotonic()
        self.note(f"{stage}: {total} inputs")

    def advance(self, stage: str, n: int = 1) -> None:
        self._done += n
        now = time.monotonic()
        if now - self._said >= EVERY:
            self._said = now
            rate = self._done / (now - self._began)
            left = f", about {(self._total - self._done) / rate:.0f} s left" if rate > 0 else ""
            self.note(f"{stage}: {self._done}/{self._total}, {rate:.1f}/s{left}")

    def finish(self, stage: str, counts: StageCounts) -> None:
        took = time.monotonic() - self._began
        self.note(
            f"{stage}: done in {took:.0f} s: {counts.n_out} out, {counts.rejected} rejected, "
            f"{counts.parse_error + counts.failed} unanswered, {counts.cached} from cache, {counts.sent} sent"
        )
