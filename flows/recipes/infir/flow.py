"""The InF-IR recipe as a Prefect flow: one task per stage of its list (``recipe.py``)."""

from __future__ import annotations

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from ifsynth.flows.run.tasks import run_stages
from ifsynth.schemas.records import StageCounts


@flow(name="infir", task_runner=ThreadPoolTaskRunner(max_workers=1))
def infir_flow(run_id: str, warehouse: str) -> list[StageCounts]:
    """Select, instructions, poison, rewrite, tuples, validate (unless `validate = false`), assemble."""
    return run_stages(run_id, warehouse)
