"""InstructIR's stages in run order: seed-select, instructions, rewrite, judge Q1, judge Q2, group filter,
assemble."""

from __future__ import annotations

from ifsynth.flows.recipes.instructir.group_filter import filter_groups
from ifsynth.flows.recipes.instructir.settings import InstructIRParams
from ifsynth.flows.run.stage import Call, Stage
from ifsynth.flows.stages.assemble import assemble_release
from ifsynth.flows.stages.instructions import GenerateInstructions
from ifsynth.flows.stages.judge import JudgePick, JudgeRelevance
from ifsynth.flows.stages.rewrite import RewritePassages
from ifsynth.flows.stages.select import select_seeds
from ifsynth.schemas.config import RecipeParams


def stages(params: RecipeParams) -> list[Stage]:
    assert isinstance(params, InstructIRParams)
    p = params
    return [
        Call("select", select_seeds),
        GenerateInstructions(k=p.instructions_per_query, max_tokens=p.max_tokens_instructions),
        RewritePassages(max_tokens=p.max_tokens_rewrite),
        JudgeRelevance(
            name="judge_relevance", source="rewrite", min_score=p.q1_min_score, max_tokens=p.max_tokens_judge
        ),
        JudgePick(name="judge_specificity", source="rewrite", max_tokens=p.max_tokens_judge),
        Call("group_filter", filter_groups, {"source": "rewrite", "min_group_size": p.min_group_size}),
        Call(
            "assemble",
            assemble_release,
            {"source": "rewrite", "max_noise": p.max_noise_passages, "noise_pool": p.noise_pool},
            whole=True,
        ),
    ]
