"""Start a run, or continue an unfinished one with the same fingerprint, and drive its Prefect flow."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ifsynth.flows.llm.limits import Budget
from ifsynth.flows.llm.pool import POOL_KEY
from ifsynth.flows.llm.route import endpoint_summaries, preflight, public_url, url_secrets
from ifsynth.flows.run.config import check_files
from ifsynth.flows.run.context import (
    NoProgress,
    Progress,
    RunContext,
    Tracker,
    activate,
    deactivate,
    labels,
    recorded,
)
from ifsynth.flows.run.prefect_api import prefect_api, start_reporting
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.signals import stoppable
from ifsynth.prompts.registry import Prompts
from ifsynth.schemas.config import Endpoint, RunConfig
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.records import RunRecord, StageCounts
from ifsynth.warehouse import audit
from ifsynth.warehouse.keys import canonical, sha256
from ifsynth.warehouse.live import LiveServer, check_free
from ifsynth.warehouse.store import Warehouse

if TYPE_CHECKING:  # Prefect is imported once its quiet defaults are set (quiet_prefect)
    from ifsynth.flows.run.flows import RecipeFlow

# Prefect in ifsynth's processes and the local server they share: quiet, offline, free of result caching.
PREFECT_DEFAULTS = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    # a run's stage lines reach its flow run's log (flows/run/tasks.py); the console has ifsynth's own
    "PREFECT_LOGGING_TO_API_ENABLED": "true",
    "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL": "INFO",
    "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "INFO",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "INFO" if os.environ.get("IFSYNTH_DEBUG") else "CRITICAL",
    "PREFECT_TASKS_DEFAULT_NO_CACHE": "true",
    "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "false",
    # ifsynth reports every failure in one line itself; Prefect's crash reports and tracebacks come with --debug
    "PREFECT_LOGGING_LEVEL": "INFO" if os.environ.get("IFSYNTH_DEBUG") else "CRITICAL",
}


@dataclass(frozen=True)
class Started:
    """A run driven to its end, with its funnel and record read before its warehouse closed: the command prints
    them without opening the file again."""

    run_id: str
    resumed: bool
    stages: list[StageCounts]
    funnel: dict[str, Any]
    record: RunRecord


def fingerprint(config: RunConfig, prompts: Prompts, templates: list[str]) -> str:
    """What decides a run's output: recipe, seeds, models, endpoints, parameters and templates."""
    # [base_url, structured_output] per role, the shape earlier versions hashed: their unfinished runs stay resumable;
    # a pool is the pool whatever its members, as its cache keys are (flows/llm/pool.py)
    endpoints = {
        role: [POOL_KEY if len(summary.get("members", ())) > 1 else summary["base_url"], summary["structured_output"]]
        for role, summary in endpoint_summaries(config).items()
    }
    return sha256(
        canonical(
            {
                "recipe": config.recipe,
                "seeds": config.seeds,
                "limit": config.limit,
                "models": [config.model_for("generator"), config.model_for("judge")],
                "endpoints": endpoints,
                "params": config.params,
                "templates": {name: prompts.hash(name) for name in templates},
                # set by `ifsynth release` only, so earlier runs' fingerprints stay as they were
                **({"humans_from": config.humans_from} if config.humans_from else {}),
                # a shard's run is a run of its own, apart from the whole run's and the other shards'
                **({"shard": [config.shard.index, config.shard.count]} if config.shard else {}),
            }
        )
    )


def execute(
    config: RunConfig, warehouse_path: str | Path, progress: Progress | None = None, *, memory_limit: str | None = None
) -> Started:
    """Start the run this config describes, or continue the unfinished one with its fingerprint, and drive
    its recipe's flow in this process."""
    progress = progress or NoProgress()
    check_free(warehouse_path)
    prompts, templates = checked(config, progress)
    with stoppable(), prefect_api(progress.note):
        flow = recipe(config.recipe).flow()
        return _drive(flow, config, prompts, templates, warehouse_path, progress, memory_limit)


def checked(config: RunConfig, progress: Progress) -> tuple[Prompts, list[str]]:
    """Everything a run can be refused for before it touches a warehouse: settings, templates, seed sources
    and endpoints; then Prefect's quiet defaults. Returns the prompts and the names of the run's templates."""
    chosen = recipe(config.recipe)
    params = chosen.settings.model_validate(config.params)
    if config.max_cost is not None:
        for model in {config.model_for("generator"), config.model_for("judge")} - set(config.prices):
            raise ConfigError(f"--max-cost needs the price of `{model}`: set prices.{model}.input and .output")
    prompts = Prompts(config.prompts_dir, chosen.prompts)
    templates = [f"{config.recipe}/{name}" for name in chosen.templates]
    for name in templates:
        prompts.check(name)  # a missing, broken or empty template fails here, before any call
    check_files(params)
    for source in chosen.seed_sources(config.seeds, params):
        source.check()  # a faulty seed source fails here, before the warehouse is touched
    for endpoint in {config.endpoint_for("generator"), config.endpoint_for("judge")} - _unused(config):
        preflight(endpoint, progress.note)
    quiet_prefect()
    return prompts, templates


def quiet_prefect() -> None:
    """Prefect's defaults for ifsynth's processes (PREFECT_DEFAULTS), unless the user set their own."""
    for key, value in PREFECT_DEFAULTS.items():
        os.environ.setdefault(key, value)


def start(config: RunConfig, warehouse_path: str | Path) -> str:
    """The run this config describes, opened in the warehouse (a new one, or the unfinished one with its
    fingerprint) for a flow run to drive; its id."""
    endpoints = [config.endpoint, *([config.judge_endpoint] if config.judge_endpoint else [])]
    if any(url_secrets(url) for e in endpoints for url in [e.base_url, *(m.base_url for m in e.members)]):
        raise ConfigError("a flow run's config is recorded by Prefect: no credentials in its URLs; use api_key_env")
    # the recipe's settings in full, as `ifsynth run` gives them: the same run has the same fingerprint
    params = recipe(config.recipe).settings.model_validate(config.params).model_dump(mode="json")
    config = config.model_copy(update={"params": params})
    prompts, templates = checked(config, NoProgress())
    with Warehouse(warehouse_path, memory_limit=os.environ.get("IFSYNTH_MEMORY_LIMIT")) as warehouse:
        run_id, _, _ = open_run(warehouse, config, fingerprint(config, prompts, templates))
    return run_id


def _unused(config: RunConfig) -> set[Endpoint]:
    """Endpoints a run never reaches: all of them when it answers from the cache alone."""
    return {config.endpoint_for("generator"), config.endpoint_for("judge")} if config.cache_only else set()


def _drive(
    flow: RecipeFlow,
    config: RunConfig,
    prompts: Prompts,
    templates: list[str],
    warehouse_path: str | Path,
    progress: Progress,
    memory_limit: str | None,
) -> Started:
    with Warehouse(warehouse_path, memory_limit=memory_limit) as warehouse:
        run_id, resumed, name = open_run(warehouse, config, fingerprint(config, prompts, templates))
        budget = Budget(config.max_calls, config.max_cost)
        tracker = Tracker(progress)
        activate(RunContext.build(run_id, config, warehouse, tracker, budget, prompts))
        try:
            start_reporting()  # once the run is open: a refused one reports nothing
            with LiveServer(warehouse, tracker.snapshot), recorded(warehouse, run_id):
                # labelled as a flow run started another way labels itself (flows/run/tasks.py): the UI never
                # shows Prefect's random name, and no call is spent relabelling it
                stages = cast(
                    "list[StageCounts]",
                    flow.run_labelled(f"{config.recipe}/{name}", labels(config), str(warehouse_path), run_id),
                )
        finally:
            deactivate(run_id)
        funnel, record = audit.funnel(warehouse, run_id), warehouse.run(run_id)
    return Started(run_id=run_id, resumed=resumed, stages=stages, funnel=funnel, record=record)


def open_run(warehouse: Warehouse, config: RunConfig, print_: str) -> tuple[str, bool, str]:
    """The run with this fingerprint marked running in ``warehouse``: the unfinished one, continued, or a new
    one. Returns its id, whether it was continued, and its name."""
    run_id = warehouse.resumable_run(print_)
    resumed = run_id is not None
    if run_id is None:
        run_id = f"{config.recipe}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    name = config.name or run_id
    clash = warehouse.name_taken(name, print_)
    if clash:
        raise ConfigError(f"run name `{name}` is taken by run {clash} with another config")
    imported = warehouse.release_row(name)  # a run's release is named as the run, and replaces its namesake
    if imported is not None and imported["run_id"] is None:
        raise ConfigError(
            f"run name `{name}` is taken by a release imported from {imported['source']}, which the run's "
            "release would replace; give another --name"
        )
    started = warehouse.run(run_id).started_at if resumed else datetime.now()
    warehouse.start_run(
        RunRecord(
            run_id=run_id,
            name=name,
            recipe=config.recipe,
            fingerprint=print_,
            config=stored_config(config),
            code_version=version("ifsynth"),
            status="running",
            started_at=started,
        )
    )
    return run_id, resumed, name


def stored_config(config: RunConfig) -> dict[str, Any]:
    """The config as the warehouse keeps it: base URLs without credentials or key-like query parameters (a
    run continued from the warehouse alone takes its key from the environment, as every run does)."""
    stored = config.model_dump(mode="json")
    for name in ("endpoint", "judge_endpoint"):
        if stored.get(name):
            stored[name]["base_url"] = public_url(stored[name]["base_url"])
            for member in stored[name]["members"]:
                member["base_url"] = public_url(member["base_url"])
    return stored
