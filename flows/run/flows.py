"""Every installed recipe's Prefect flow, by the recipe's name: ``ifsynth.flows.run.flows:<recipe>`` is the
entry point a deployment or a worker loads, the same for a recipe of another package.

Each flow runs its recipe's stages, one task each (``run_stages``); only the name and description differ, so
they are made here from the declarations rather than written once per recipe."""

from __future__ import annotations

from functools import cache
from typing import Any, cast

from prefect import Flow, tags
from prefect.futures import PrefectFuture
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from ifsynth.flows.run.registry import recipe, recipes
from ifsynth.flows.run.tasks import run_stages

TASK_THREADS = 32  # more than any recipe has stages


class RecipeFlow(Flow[..., Any]):
    """A recipe's flow. Its parameters are JSON values already (a path, a run id, a config), so they are
    recorded as they are: Prefect's own encoder would import FastAPI for them, a quarter of a second of every
    command's start (a value of another kind still goes through it)."""

    def serialize_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        if all(_json(value) for value in parameters.values()):
            return dict(parameters)
        return super().serialize_parameters(parameters)

    def named(self, flow_run_name: str) -> RecipeFlow:
        """This flow, its runs named ``flow_run_name`` from their creation (Prefect's ``with_options`` would
        make a plain ``Flow``)."""
        return _made(self.name, self.description, flow_run_name)

    def run_labelled(self, flow_run_name: str, labels: list[str], *parameters: Any) -> Any:
        """One run of this flow in this process, named and tagged from its creation: it then need not label
        itself (``tasks._label``)."""
        with tags(*labels):
            return self.named(flow_run_name)(*parameters)


def _json(value: object) -> bool:
    """Whether ``value`` is made of JSON's own types only, which Prefect's encoder returns unchanged."""
    if value is None or isinstance(value, str | int | float | bool):
        return True
    if isinstance(value, list):
        return all(_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _json(item) for key, item in value.items())
    return False


def _made(name: str, description: str | None, flow_run_name: str | None = None) -> RecipeFlow:
    # the tasks of stages that run together wait in threads of their own (flows/run/tasks.py); Prefect's own
    # annotation of task_runner is narrower than the runners it takes
    runner = cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=TASK_THREADS))
    return RecipeFlow(run_stages, name=name, description=description, task_runner=runner, flow_run_name=flow_run_name)


@cache
def recipe_flow(name: str) -> RecipeFlow:
    """The flow of recipe ``name``: it takes the warehouse's path and a run id, or the config of a run to start."""
    declared = recipe(name)
    return _made(declared.name, f"{declared.summary} ({declared.paper})")


def __getattr__(name: str) -> RecipeFlow:
    """A recipe's flow as this module's attribute, as Prefect's entry points read it."""
    if name not in recipes():
        raise AttributeError(f"no installed recipe `{name}`")
    return recipe_flow(name)
