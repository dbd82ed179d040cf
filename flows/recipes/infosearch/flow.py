"""The InfoSearch recipe as a Prefect flow: one task per stage, each a thin call of a plain function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

from ifsynth.flows.recipes.infosearch.assemble import assemble_infosearch
from ifsynth.flows.recipes.infosearch.collect import collect_seeds
from ifsynth.flows.recipes.infosearch.document_rules import check_documents
from ifsynth.flows.recipes.infosearch.keywords import extract_keywords
from ifsynth.flows.recipes.infosearch.negatives import generate_negatives
from ifsynth.flows.recipes.infosearch.reversal import reverse_instructions
from ifsynth.flows.run.context import RunContext, context
from ifsynth.flows.run.registry import RECIPES
from ifsynth.flows.run.stage import pages_where
from ifsynth.flows.stages.instructions import generate_instructions
from ifsynth.flows.stages.judge import judge_relevance
from ifsynth.flows.stages.rewrite import rewrite_passages
from ifsynth.schemas.answers import NegationJudgement, TwoSentenceInstruction
from ifsynth.schemas.config import InfoSearchParams
from ifsynth.schemas.records import ItemRecord, StageCounts


def _ctx(run_id: str) -> tuple[RunContext, InfoSearchParams]:
    ctx = context(run_id)
    assert isinstance(ctx.params, InfoSearchParams)
    return ctx, ctx.params


def _fields(*names: str) -> Callable[[ItemRecord], dict[str, Any]]:
    """Template variables read from an item's payload."""
    return lambda item: {name: (item.payload or {})[name] for name in names}


@task(name="collect")
def collect(run_id: str) -> StageCounts:
    return collect_seeds(context(run_id), 1)


@task(name="keywords")
def keywords(run_id: str) -> StageCounts:
    ctx, p = _ctx(run_id)
    return extract_keywords(ctx, 2, source="collect", max_tokens=p.max_tokens_keyword)


@task(name="rewrite")
def rewrite(run_id: str) -> StageCounts:
    ctx, p = _ctx(run_id)

    def seed_to_rewrite(item: ItemRecord) -> bool:
        payload = item.payload or {}
        if item.kind != "document":
            return False
        spec = p.dimension_specs[payload["dimension"]]
        return bool(spec.rewrites) and payload["condition"] == spec.seed_condition

    def targets(document: ItemRecord) -> list[dict[str, Any]]:
        payload = document.payload or {}
        spec = p.dimension_specs[payload["dimension"]]
        return [
            {
                "query": payload["query"],
                "passage": payload["passage"],
                "dimension": payload["dimension"],
                "seed_kind": spec.seed_kind,
                "condition": condition,
                "target": target,
                "position": spec.conditions.index(condition) + 1,
                "origin": "rewrite",
            }
            for condition, target in spec.rewrites.items()
        ]

    return rewrite_passages(
        ctx,
        3,
        max_tokens=p.max_tokens_rewrite,
        source="collect",
        targets=targets,
        pages=pages_where(ctx, "collect", seed_to_rewrite),
    )


@task(name="rules")
def rules(run_id: str) -> StageCounts:
    return check_documents(context(run_id), 5, sources=("collect", "keywords", "rewrite", "negatives"))


@task(name="judge_rewrite")
def judge_rewrite(run_id: str) -> StageCounts:
    ctx, p = _ctx(run_id)
    return judge_relevance(
        ctx,
        6,
        stage="judge_rewrite",
        source="rules",
        min_score=p.min_rewrite_score,
        max_tokens=p.max_tokens_judge,
        variables=_fields("query", "passage", "condition"),
        pages=pages_where(ctx, "rules", lambda item: (item.payload or {}).get("origin") == "rewrite"),
    )


@task(name="negatives")
def negatives(run_id: str) -> StageCounts:
    ctx, p = _ctx(run_id)
    return generate_negatives(ctx, 4, source="collect", n=p.query_negatives, max_tokens=p.max_tokens_negatives)


@task(name="judge_negatives")
def judge_negatives(run_id: str) -> StageCounts:
    ctx, p = _ctx(run_id)
    return judge_relevance(
        ctx,
        7,
        stage="judge_negatives",
        source="rules",
        min_score=1,
        max_score=p.max_negative_score,
        max_tokens=p.max_tokens_judge,
        pages=pages_where(ctx, "rules", lambda item: item.kind == "negative"),
    )


@task(name="instructions")
def instructions(run_id: str) -> StageCounts:
    ctx, p = _ctx(run_id)

    def variables(document: ItemRecord) -> dict[str, Any]:
        payload = document.payload or {}
        spec = p.dimension_specs[payload["dimension"]]
        return {
            "query": payload["query"],
            "dimension": payload["dimension"],
            "condition": payload["condition"],
            "siblings": [c for c in spec.conditions if c != payload["condition"]],
        }

    return generate_instructions(
        ctx,
        8,
        max_tokens=p.max_tokens_instruction,
        source="rules",
        schema=TwoSentenceInstruction,
        variables=variables,
        pages=pages_where(ctx, "rules", lambda item: item.kind == "document"),
    )


@task(name="reversal")
def reversal(run_id: str) -> StageCounts:
    ctx, p = _ctx(run_id)
    return reverse_instructions(ctx, 9, source="instructions", max_tokens=p.max_tokens_reversal)


@task(name="judge_reversal")
def judge_reversal(run_id: str) -> StageCounts:
    ctx, p = _ctx(run_id)
    return judge_relevance(
        ctx,
        10,
        stage="judge_reversal",
        source="reversal",
        min_score=p.min_reversal_score,
        max_tokens=p.max_tokens_judge,
        schema=NegationJudgement,
        variables=_fields("instruction", "reversed_instruction"),
    )


@task(name="assemble")
def assemble(run_id: str) -> StageCounts:
    templates = [f"infosearch/{name}" for name in RECIPES["infosearch"].templates]
    return assemble_infosearch(context(run_id), 11, templates=templates, reversals="reversal", negatives="rules")


@flow(name="infosearch", task_runner=ThreadPoolTaskRunner(max_workers=1))
def infosearch_flow(run_id: str) -> list[StageCounts]:
    """Collect, keywords, rewrite, query negatives, rules, the rewrite and negative judges, instructions,
    reversal, the reversal judge, assemble."""
    stages = (
        collect, keywords, rewrite, negatives, rules, judge_rewrite, judge_negatives, instructions, reversal,
        judge_reversal, assemble,
    )  # fmt: skip
    return [stage(run_id) for stage in stages]
