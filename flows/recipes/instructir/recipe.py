"""InstructIR's stages in run order: seed-select, instructions, rewrite, judge Q1, judge Q2, group filter,
assemble."""

from __future__ import annotations

from ifsynth.flows.recipes.instructir.group_filter import FilterGroups
from ifsynth.flows.recipes.instructir.settings import InstructIRParams
from ifsynth.flows.run.stage import Stage
from ifsynth.flows.stages.assemble import AssembleRelease
from ifsynth.flows.stages.instructions import GenerateInstructions
from ifsynth.flows.stages.judge import JudgePick, JudgeRelevance
from ifsynth.flows.stages.rewrite import RewritePassages
from ifsynth.flows.stages.select import SelectSeeds
from ifsynth.schemas.config import RecipeParams


def stages(params: RecipeParams) -> list[Stage]:
    assert isinstance(params, InstructIRParams)
    p = params
    return [
        SelectSeeds(),
        GenerateInstructions(k=p.instructions_per_query, max_tokens=p.max_tokens_instructions),
        RewritePassages(max_tokens=p.max_tokens_rewrite),
        JudgeRelevance(
            name="judge_relevance", source="rewrite", min_score=p.q1_min_score, max_tokens=p.max_tokens_judge
        ),
        JudgePick(name="judge_specificity", source="rewrite", max_tokens=p.max_tokens_judge),
        FilterGroups(min_group_size=p.min_group_size),
        AssembleRelease(max_noise=p.max_noise_passages, noise_pool=p.noise_pool),
    ]
