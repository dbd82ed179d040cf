"""The InstructIR recipe as a Prefect flow: one task per stage, each a thin call of a plain function."""

from __future__ import annotations

from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

from ifsynth.flows.recipes.instructir.group_filter import filter_groups
from ifsynth.flows.run.context import context
from ifsynth.flows.run.registry import RECIPES
from ifsynth.flows.stages.assemble import assemble_release
from ifsynth.flows.stages.instructions import generate_instructions
from ifsynth.flows.stages.judge import judge_pick, judge_relevance
from ifsynth.flows.stages.rewrite import rewrite_passages
from ifsynth.flows.stages.select import select_seeds
from ifsynth.schemas.config import InstructIRParams
from ifsynth.schemas.records import StageCounts


def _params(run_id: str) -> InstructIRParams:
    params = context(run_id).params
    assert isinstance(params, InstructIRParams)
    return params


@task(name="select")
def select(run_id: str) -> StageCounts:
    return select_seeds(context(run_id), 1)


@task(name="instructions")
def instructions(run_id: str) -> StageCounts:
    p = _params(run_id)
    return generate_instructions(context(run_id), 2, k=p.instructions_per_query, max_tokens=p.max_tokens_instructions)


@task(name="rewrite")
def rewrite(run_id: str) -> StageCounts:
    return rewrite_passages(context(run_id), 3, max_tokens=_params(run_id).max_tokens_rewrite)


@task(name="judge_relevance")
def relevance(run_id: str) -> StageCounts:
    p = _params(run_id)
    return judge_relevance(
        context(run_id),
        4,
        stage="judge_relevance",
        source="rewrite",
        min_score=p.q1_min_score,
        max_tokens=p.max_tokens_judge,
    )


@task(name="judge_specificity")
def specificity(run_id: str) -> StageCounts:
    return judge_pick(
        context(run_id), 5, stage="judge_specificity", source="rewrite", max_tokens=_params(run_id).max_tokens_judge
    )


@task(name="group_filter")
def group_filter(run_id: str) -> StageCounts:
    return filter_groups(context(run_id), 6, source="rewrite", min_group_size=_params(run_id).min_group_size)


@task(name="assemble")
def assemble(run_id: str) -> StageCounts:
    templates = [f"instructir/{name}" for name in RECIPES["instructir"].templates]
    return assemble_release(
        context(run_id), 7, source="rewrite", templates=templates, max_noise=_params(run_id).max_noise_passages
    )


@flow(name="instructir", task_runner=ThreadPoolTaskRunner(max_workers=1))
def instructir_flow(run_id: str) -> list[StageCounts]:
    """Seed-select, instructions, rewrite, judge Q1, judge Q2, group filter, assemble."""
    return [stage(run_id) for stage in (select, instructions, rewrite, relevance, specificity, group_filter, assemble)]
