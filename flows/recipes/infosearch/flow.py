"""The InfoSearch recipe as a Prefect flow: one task per stage of its list (``recipe.py``)."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from ifsynth.flows.run.tasks import run_stages
from ifsynth.schemas.records import StageCounts


@flow(name="infosearch", task_runner=ThreadPoolTaskRunner(max_workers=1))
def infosearch_flow(warehouse: str, run_id: str = "", config: dict[str, Any] | None = None) -> list[StageCounts]:
    """Collect, keywords, rewrite, query negatives, rules, the rewrite and negative judges, instructions,
    reversal, the reversal judge, assemble."""
    return run_stages(warehouse, run_id, config)
