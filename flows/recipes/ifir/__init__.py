"""The IFIR recipe: expert-domain queries with three nested instruction levels (RECIPES.md §5)."""

from ifsynth.flows.recipes.ifir.fidelity import DIFFERENCES
from ifsynth.flows.recipes.ifir.settings import IFIRParams
from ifsynth.flows.run.registry import Recipe
from ifsynth.schemas.modes import RecipeMetrics

RECIPE = Recipe(
    name="ifir",
    summary="a benchmark of expert-domain queries, each with three nested instruction levels",
    paper="Song et al., IFIR: A Comprehensive Benchmark for Evaluating Instruction-Following in Expert-Domain "
    "Information Retrieval (2025)",
    settings=IFIRParams,
    stages="ifsynth.flows.recipes.ifir.recipe:stages",
    seeds="ifsynth.flows.recipes.ifir.recipe:seed_sources",
    metrics=RecipeMetrics(ndcg=(20,), mrr=(20,), map=False, robustness=None),
    differences=DIFFERENCES,
    exports={"ifir": "ifsynth.flows.recipes.ifir.export:write"},
    imports={"ifir": "ifsynth.warehouse.imports:read_ifir"},
    card="ifsynth.flows.recipes.ifir.export:card",
)
