"""The InF-IR recipe as a Prefect flow: one task per stage of its list (``recipe.py``)."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from ifsynth.flows.run.tasks import run_stages
from ifsynth.schemas.records import StageCounts


@flow(name="infir", task_runner=ThreadPoolTaskRunner(max_workers=1))
def infir_flow(warehouse: str, run_id: str = "", config: dict[str, Any] | None = None) -> list[StageCounts]:
    """Select, instructions, poison, rewrite, tuples, validate (unless `validate = false`), assemble."""
    return run_stages(warehouse, run_id, config)
