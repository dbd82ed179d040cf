"""The Prefect side of every recipe: each stage of the recipe's list runs as one task named after it.

A flow takes the warehouse's location and the run id (or the config of a run to start), a task the run id and
the stage's ordinal (Prefect records parameters; no key is ever one) and finds the rest in the run's context.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable
from typing import Any, cast

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext, TagsContext
from prefect.logging.handlers import APILogWorker
from prefect.settings import PREFECT_LOGGING_TO_API_ENABLED

from ifsynth.flows.run.context import Lines, RunContext, attach, check_failures, context, labels
from ifsynth.flows.run.pipeline import Pipeline, together
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.runner import start
from ifsynth.flows.run.signals import stoppable
from ifsynth.flows.run.stage import LLMStage, Stage
from ifsynth.schemas.config import RunConfig
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.records import StageCounts
from ifsynth.warehouse import audit
from ifsynth.warehouse.cards import markdown as card_markdown


@task
def run_stage(run_id: str, order: int) -> StageCounts:
    ctx = context(run_id)
    together = ctx.together.get(order)
    if together is not None:  # the flow runs it with the stages beside it; this task stands for it
        return together.result()
    stage = recipe(ctx.recipe).stage_list(ctx.params, sharded=ctx.config.shard is not None)[order - 1]
    return stage.run(ctx, order)


def run_stages(warehouse: str, run_id: str = "", config: dict[str, Any] | None = None) -> list[StageCounts]:
    """Every stage of the run's recipe, in list order, one task each; in a process that did not start the
    run, its context is rebuilt from ``warehouse`` first. Given a ``config`` (settings, never a key) instead of
    a run id, the run it describes is started, or the unfinished one with its fingerprint continued: how a
    served or deployed flow is started from Prefect's UI or ``prefect deployment run``."""
    if not run_id:
        if config is None:
            raise ConfigError("a flow run takes the id of a run in its warehouse, or the config of a run to start")
        run_id = start(RunConfig.model_validate(config), warehouse)  # refuses credentials in its URLs
    with stoppable(), attach(run_id, warehouse) as ctx:
        _label(ctx)
        stages = recipe(ctx.recipe).stage_list(ctx.params, sharded=ctx.config.shard is not None)
        sets = [[order] for order in range(1, len(stages) + 1)]
        if not ctx.config.stage_by_stage:
            sets = together(stages, batch=ctx.config.batch)
        with contextlib.ExitStack() as sending:
            try:
                # the stages' task runs untagged, whatever tagged the flow run (prefect.tags can only add): for
                # tagged task runs Prefect asks its server for the tags' concurrency limits, and a user's limit
                # would hold stages back
                with ctx.progress.listening(Lines(get_run_logger().info)), TagsContext(current_tags=set()):
                    counts = []
                    for orders in sets:
                        if len(orders) == 1:
                            counts.append(run_stage.with_options(name=stages[orders[0] - 1].name)(run_id, orders[0]))
                        else:
                            counts += _run_together(ctx, [(order, stages[order - 1]) for order in orders])
            finally:
                sending.callback(send_logs())  # what the stages logged, sent while the funnel is published
            check_failures(ctx.warehouse, run_id, counts, ctx.config.max_failure_share)
            _publish(ctx.warehouse, run_id)
        return counts


def _run_together(ctx: RunContext, members: list[tuple[int, Stage]]) -> list[StageCounts]:
    """LLM stages run together in this thread (a stop signal reaches their event loop), each with its task
    run in Prefect, under way while its stage is and ending with its counts or its error."""
    pipeline = Pipeline(ctx, [(order, cast("LLMStage[Any]", stage)) for order, stage in members])
    ctx.together.update(pipeline.results)
    tasks = []
    try:
        for order, stage in members:
            tasks.append(run_stage.with_options(name=stage.name).submit(ctx.run_id, order))
        return pipeline.run()
    except BaseException as exc:  # the run itself, or a task's submission (Prefect's API), failed
        pipeline.abandon(exc)
        raise
    finally:
        for submitted in tasks:
            submitted.wait()
        for order, _ in members:
            del ctx.together[order]


def send_logs(timeout: float = 5.0) -> Callable[[], None]:
    """Start sending the log lines logged so far; returns the wait for them to reach Prefect, which comes
    before the flow run ends: a worker's process may not outlive it. Lines logged after (Prefect's own line on
    the flow run's end) go to a log worker started again, sent as the process exits. Only the log worker is
    drained: Prefect's ``drain_all`` stops every service of the process, and the flow run's end then started
    its events worker again too, with an API client of its own."""
    if not PREFECT_LOGGING_TO_API_ENABLED.value():
        return lambda: None
    sender = threading.Thread(target=APILogWorker.instance().drain, name="prefect-logs-drain", daemon=True)
    sender.start()
    return lambda: sender.join(timeout)  # a server that no longer answers holds the run's end no longer than this


def _label(ctx: RunContext) -> None:
    """The flow run as Prefect's UI lists it, however it was started (``ifsynth run``, a deployment, a worker,
    ``ifsynth serve``): named ``<recipe>/<run name>`` (a name its starter gave in that form is kept: a shard's
    says which shard it is) and tagged with the recipe, the seeds and the models (never a key: none is a
    parameter, a name or a tag). Read as the flow run started; ``ifsynth run`` creates it so labelled, and
    then no call to Prefect's API is made."""
    config = ctx.config
    running = FlowRunContext.get()
    assert running is not None and running.flow_run is not None, "called inside the flow run"
    current = running.flow_run
    named = current.name.startswith(f"{config.recipe}/")
    name = current.name if named else f"{config.recipe}/{ctx.warehouse.run(ctx.run_id).name}"
    missing = [label for label in labels(config) if label not in current.tags]
    if name != current.name or missing:
        with get_client(sync_client=True) as client:
            client.update_flow_run(current.id, name=name, tags=[*current.tags, *missing])


def _publish(warehouse: Any, run_id: str) -> None:
    """The funnel as a table artifact and the release's card as a markdown one, on the flow run."""
    report = audit.funnel(warehouse, run_id)
    key = re.sub(r"[^a-z0-9-]+", "-", report["name"].lower()).strip("-") or "run"
    columns = ("stage", "in", "out", "set_aside", "rejected", "parse_error", "failed", "cached", "sent")
    create_table_artifact(
        key=f"{key}-funnel",
        table=[{c: stage[c] for c in columns} for stage in report["stages"]],
        description=f"Funnel of run {run_id}: accepted {report['accepted']}",
    )
    card = warehouse.release_card(run_id)
    if card is not None:
        create_markdown_artifact(key=f"{key}-card", markdown=card_markdown(json.loads(card)))
