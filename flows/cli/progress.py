"""A progress bar per stage, on stderr, fed by the stages through the Progress protocol."""

from __future__ import annotations

from typing import Self

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ifsynth.schemas.records import StageCounts


class RichProgress:
    def __init__(self, console: Console) -> None:
        self._bars = Progress(
            TextColumn("{task.description:<18}"),
            BarColumn(),
            MofNCompleteColumn(),
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
        self._bars.console.print(message, markup=False, highlight=False)

    def start(self, stage: str, total: int) -> None:
        if stage in self._tasks:
            self._bars.reset(self._tasks[stage], total=total)
        else:
            self._tasks[stage] = self._bars.add_task(stage, total=total)

    def advance(self, stage: str, n: int = 1) -> None:
        self._bars.advance(self._tasks[stage], n)

    def finish(self, stage: str, counts: StageCounts) -> None:
        task = self._tasks[stage]
        self._bars.update(task, completed=counts.n_in, total=counts.n_in)
