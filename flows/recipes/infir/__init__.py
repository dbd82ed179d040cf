"""The InF-IR recipe: training tuples with poisoned instructions and queries (RECIPES.md §4)."""

from ifsynth.flows.recipes.infir.fidelity import DIFFERENCES
from ifsynth.flows.recipes.infir.settings import InfIRParams
from ifsynth.flows.run.registry import Recipe
from ifsynth.schemas.modes import RecipeMetrics

RECIPE = Recipe(
    name="infir",
    summary="training tuples: a positive with a poisoned instruction, a poisoned query and their passages",
    paper="Towards Better Instruction Following Retrieval Models (InF-IR, 2025)",
    settings=InfIRParams,
    stages="ifsynth.flows.recipes.infir.recipe:stages",
    metrics=RecipeMetrics(ndcg=(10,), mrr=(10,), robustness=None),
    differences=DIFFERENCES,
    exports={
        "infir": "ifsynth.flows.recipes.infir.export:write_tuples",
        "triplets": "ifsynth.flows.recipes.infir.export:write_triplets",
        "hf": "ifsynth.flows.recipes.infir.export:write_hf",
    },
    imports={"infir": "ifsynth.warehouse.imports:read_infir"},
    card="ifsynth.flows.recipes.infir.export:card",
)
