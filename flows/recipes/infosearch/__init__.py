"""The InfoSearch recipe: six document dimensions, each core query with an instructed, a reversed and a
plain mode (RECIPES.md §2)."""

from ifsynth.flows.recipes.infosearch.fidelity import DIFFERENCES
from ifsynth.flows.recipes.infosearch.settings import InfoSearchParams
from ifsynth.flows.run.registry import Recipe
from ifsynth.schemas.modes import RecipeMetrics

RECIPE = Recipe(
    name="infosearch",
    summary="a benchmark over six document dimensions, each query instructed, reversed and plain",
    paper="Zhou et al., Beyond Content Relevance: Evaluating Instruction Following in Retrieval Models "
    "(InfoSearch, 2024)",
    settings=InfoSearchParams,
    stages="ifsynth.flows.recipes.infosearch.recipe:stages",
    seeds="ifsynth.flows.recipes.infosearch.recipe:seed_sources",
    metrics=RecipeMetrics(ndcg=(10,), mrr=(1,), map=False, robustness=10),
    differences=DIFFERENCES,
    exports={"infosearch": "ifsynth.flows.recipes.infosearch.export:write"},
    imports={"infosearch": "ifsynth.warehouse.imports:read_infosearch"},
    card="ifsynth.flows.recipes.infosearch.export:card_facts",
)
