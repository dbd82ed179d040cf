"""What every stage of a run needs, found by run id.

Prefect records flow and task parameters, so tasks take only the run id (never a connection or a key) and
look up the live context of this process here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ifsynth.flows.llm.limits import Budget
from ifsynth.flows.seeds import SeedSource
from ifsynth.prompts.registry import Prompts
from ifsynth.schemas.config import RecipeParams, RunConfig
from ifsynth.schemas.records import StageCounts
from ifsynth.warehouse.store import Warehouse


class Progress(Protocol):
    def start(self, stage: str, total: int) -> None: ...

    def advance(self, stage: str, n: int = 1) -> None: ...

    def finish(self, stage: str, counts: StageCounts) -> None: ...


class NoProgress:
    def start(self, stage: str, total: int) -> None:
        pass

    def advance(self, stage: str, n: int = 1) -> None:
        pass

    def finish(self, stage: str, counts: StageCounts) -> None:
        pass


@dataclass
class RunContext:
    run_id: str
    config: RunConfig
    params: RecipeParams
    warehouse: Warehouse
    prompts: Prompts
    source: SeedSource
    progress: Progress = field(default_factory=NoProgress)
    budget: Budget = field(default_factory=Budget)

    @property
    def recipe(self) -> str:
        return self.config.recipe

    def template(self, stage: str) -> str:
        return f"{self.recipe}/{stage}"


_ACTIVE: dict[str, RunContext] = {}


def activate(context: RunContext) -> None:
    _ACTIVE[context.run_id] = context


def deactivate(run_id: str) -> None:
    _ACTIVE.pop(run_id, None)


def context(run_id: str) -> RunContext:
    return _ACTIVE[run_id]
