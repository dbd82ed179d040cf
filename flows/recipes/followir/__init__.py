"""The FollowIR recipe: TREC narratives altered to narrow relevance, re-judged documents, a rerank pool; or
training rows of synthetic documents labelled against a narrative (RECIPES.md §3)."""

from ifsynth.flows.recipes.followir.fidelity import DIFFERENCES
from ifsynth.flows.recipes.followir.settings import FollowIRParams
from ifsynth.flows.run.registry import Recipe
from ifsynth.schemas.modes import RecipeMetrics

RECIPE = Recipe(
    name="followir",
    summary="a reranking benchmark of altered TREC narratives (p-MRR), or training rows (mode=train)",
    paper="Weller et al., FollowIR: Evaluating and Teaching Information Retrieval Models to Follow Instructions "
    "(2024), and its release jhu-clsp/FollowIR",
    settings=FollowIRParams,
    stages="ifsynth.flows.recipes.followir.recipe:stages",
    variants=({}, {"mode": "train"}),
    seeds="ifsynth.flows.recipes.followir.recipe:seed_sources",
    metrics=RecipeMetrics(ndcg=(5,), mrr=(), robustness=None),
    differences=DIFFERENCES,
    exports={
        "followir": "ifsynth.flows.recipes.followir.export:write",
        "triplets": "ifsynth.flows.recipes.followir.export:write_triplets",
    },
    imports={"followir": "ifsynth.warehouse.imports:read_followir"},
    card="ifsynth.flows.recipes.followir.export:card",
)
