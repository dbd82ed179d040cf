"""Progress on stderr, fed by the stages through the Progress protocol: a bar per stage on a terminal (done and
total, rate, time left, elapsed), one line per stage and a line every half minute otherwise (a log file, a
scheduler's output), so a long run shows it is alive wherever it is watched."""

from __future__ import annotations

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

from ifsynth.flows.run.context import Lines
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

    def more(self, stage: str, n: int) -> None:
        task = self._tasks[stage]
        self._bars.update(task, total=(self._bars.tasks[task].total or 0) + n)

    def advance(self, stage: str, n: int = 1) -> None:
        task = self._tasks[stage]
        self._bars.advance(task, n)
        speed = self._bars.tasks[task].speed
        if speed:
            self._bars.update(task, rate=f"{speed:.1f}/s")

    def finish(self, stage: str, counts: StageCounts) -> None:
        task = self._tasks[stage]
        self._bars.update(task, completed=counts.n_in, total=counts.n_in)


class PlainProgress(Lines):
    """Lines instead of bars: a stage's start, a line every EVERY seconds while it runs, and its end."""

    def __init__(self, console: Console) -> None:
        super().__init__(lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True), EVERY)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        pass
