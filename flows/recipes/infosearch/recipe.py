"""InfoSearch's stages in run order: collect, keywords, rewrite, query negatives, rules, the rewrite and
negative judges, the retrieval panel, instructions, reversal, the reversal judge, assemble."""

from __future__ import annotations

from functools import partial
from typing import Any

from ifsynth.flows.recipes.infosearch.assemble import AssembleInfoSearch
from ifsynth.flows.recipes.infosearch.collect import CollectSeeds, dimension_source
from ifsynth.flows.recipes.infosearch.document_rules import CheckDocuments
from ifsynth.flows.recipes.infosearch.keywords import ExtractKeywords
from ifsynth.flows.recipes.infosearch.negatives import GenerateNegatives
from ifsynth.flows.recipes.infosearch.panel import ReviewDocuments
from ifsynth.flows.recipes.infosearch.reversal import ReverseInstructions
from ifsynth.flows.recipes.infosearch.settings import InfoSearchParams
from ifsynth.flows.run.stage import Stage
from ifsynth.flows.seeds import SeedSource
from ifsynth.flows.stages.instructions import GenerateInstructions
from ifsynth.flows.stages.judge import JudgeRelevance, fields
from ifsynth.flows.stages.rewrite import RewritePassages
from ifsynth.schemas.answers import NegationJudgement, TwoSentenceInstruction
from ifsynth.schemas.config import RecipeParams
from ifsynth.schemas.infosearch import ConditionedDocument, Document
from ifsynth.schemas.records import ItemRecord


def seed_sources(seeds: str, params: RecipeParams) -> list[SeedSource]:
    """One source per dimension: its own seeds, else the run's."""
    assert isinstance(params, InfoSearchParams)
    return [dimension_source(seeds, params.dimension_specs[name], name) for name in params.dimensions]


def seed_to_rewrite(p: InfoSearchParams, item: ItemRecord) -> bool:
    """A collected seed document whose dimension makes its other conditions by rewriting it."""
    if item.kind != "document":
        return False
    document = item.read(Document)
    spec = p.dimension_specs[document.dimension]
    return bool(spec.rewrites) and document.condition == spec.seed_condition


def rewrite_targets(p: InfoSearchParams, document: ItemRecord) -> list[dict[str, Any]]:
    """One rewrite per condition the seed document lacks."""
    seed = document.read(Document)
    spec = p.dimension_specs[seed.dimension]
    return [
        {
            "query": seed.query,
            "passage": seed.passage,
            "dimension": seed.dimension,
            "seed_kind": spec.seed_kind,
            "condition": condition,
            "target": target,
            "position": spec.conditions.index(condition) + 1,
            "origin": "rewrite",
        }
        for condition, target in spec.rewrites.items()
    ]


def instruction_variables(p: InfoSearchParams, document: ItemRecord) -> dict[str, Any]:
    positive = document.read(ConditionedDocument)
    spec = p.dimension_specs[positive.dimension]
    return {
        "query": positive.query,
        "dimension": positive.dimension,
        "condition": positive.condition,
        "siblings": [c for c in spec.conditions if c != positive.condition],
    }


def rewritten(item: ItemRecord) -> bool:
    return item.kind == "document" and item.read(Document).origin == "rewrite"


def is_negative(item: ItemRecord) -> bool:
    return item.kind == "negative"


def is_document(item: ItemRecord) -> bool:
    return item.kind == "document"


def stages(params: RecipeParams) -> list[Stage]:
    assert isinstance(params, InfoSearchParams)
    p = params
    return [
        CollectSeeds(),
        ExtractKeywords(max_tokens=p.max_tokens_keyword),
        RewritePassages(
            source="collect",
            max_tokens=p.max_tokens_rewrite,
            targets=partial(rewrite_targets, p),
            keep=partial(seed_to_rewrite, p),
        ),
        GenerateNegatives(per_positive=p.negatives_per_positive, max_tokens=p.max_tokens_negatives),
        CheckDocuments(sources=("collect", "keywords", "rewrite", "negatives")),
        JudgeRelevance(
            name="judge_rewrite",
            source="rules",
            min_score=p.min_rewrite_score,
            max_tokens=p.max_tokens_judge,
            variables=fields("query", "passage", "condition"),
            keep=rewritten,
        ),
        JudgeRelevance(
            name="judge_negatives",
            source="rules",
            min_score=1,
            max_score=p.max_negative_score,
            max_tokens=p.max_tokens_judge,
            keep=is_negative,
        ),
        ReviewDocuments(),
        GenerateInstructions(
            source="rules",
            max_tokens=p.max_tokens_instruction,
            schema=TwoSentenceInstruction,
            variables=partial(instruction_variables, p),
            keep=is_document,
        ),
        ReverseInstructions(max_tokens=p.max_tokens_reversal),
        JudgeRelevance(
            name="judge_reversal",
            source="reversal",
            min_score=p.min_reversal_score,
            max_tokens=p.max_tokens_judge,
            schema=NegationJudgement,
            variables=fields("instruction", "reversed_instruction"),
        ),
        AssembleInfoSearch(),
    ]
