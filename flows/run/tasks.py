"""The Prefect side of every recipe: each stage of the recipe's list runs as one task named after it.

A flow takes the run id and the warehouse's location, a task the run id and the stage's ordinal (Prefect
records parameters; no key is ever one) and finds the rest in the run's context.
"""

from __future__ import annotations

from prefect import task

from ifsynth.flows.run.context import attach, context
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.signals import stoppable
from ifsynth.schemas.records import StageCounts


@task
def run_stage(run_id: str, order: int) -> StageCounts:
    ctx = context(run_id)
    stage = recipe(ctx.recipe).stages(ctx.params)[order - 1]
    return stage.run(ctx, order)


def run_stages(run_id: str, warehouse: str) -> list[StageCounts]:
    """Every stage of the run's recipe, in list order, one task each; in a process that did not start the
    run, its context is rebuilt from ``warehouse`` first."""
    with stoppable(), attach(run_id, warehouse) as ctx:
        stages = recipe(ctx.recipe).stages(ctx.params)
        return [run_stage.with_options(name=stage.name)(run_id, order) for order, stage in enumerate(stages, 1)]
