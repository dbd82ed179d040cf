"""Every installed recipe's Prefect flow, by the recipe's name: ``ifsynth.flows.run.flows:<recipe>`` is the
entry point a deployment or a worker loads, the same for a recipe of another package.

Each flow runs its recipe's stages, one task each (``run_stages``); only the name and description differ, so
they are made here from the declarations rather than written once per recipe."""

from __future__ import annotations

from functools import cache
from typing import Any, cast

from prefect import Flow
from prefect.futures import PrefectFuture
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from ifsynth.flows.run.registry import recipe, recipes
from ifsynth.flows.run.tasks import run_stages


@cache
def recipe_flow(name: str) -> Flow[..., Any]:
    """The flow of recipe ``name``: it takes the warehouse's path and a run id, or the config of a run to start."""
    declared = recipe(name)
    # one stage at a time; Prefect's own annotation of task_runner is narrower than the runners it takes
    runner = cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=1))
    return Flow(
        run_stages, name=declared.name, description=f"{declared.summary} ({declared.paper})", task_runner=runner
    )


def __getattr__(name: str) -> Flow[..., Any]:
    """A recipe's flow as this module's attribute, as Prefect's entry points read it."""
    if name not in recipes():
        raise AttributeError(f"no installed recipe `{name}`")
    return recipe_flow(name)
