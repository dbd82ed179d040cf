"""The FollowIR recipe as a Prefect flow: one task per stage of its list (``recipe.py``)."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.task_runners import ThreadPoolTaskRunner

from ifsynth.flows.run.tasks import run_stages
from ifsynth.schemas.records import StageCounts


@flow(name="followir", task_runner=ThreadPoolTaskRunner(max_workers=1))
def followir_flow(warehouse: str, run_id: str = "", config: dict[str, Any] | None = None) -> list[StageCounts]:
    """Evaluation set: select, alter, rejudge, select_alteration, pool, assemble; training set: select,
    write_documents, judge_documents, balance, assemble (each with the ablation stages unless switched off)."""
    return run_stages(warehouse, run_id, config)
