"""The InstructIR recipe: user-aligned instructions for a query's positive, the positive revised for each, two
judges and a group filter (RECIPES.md §1)."""

from ifsynth.flows.recipes.instructir.fidelity import DIFFERENCES
from ifsynth.flows.recipes.instructir.settings import InstructIRParams
from ifsynth.flows.run.registry import Recipe
from ifsynth.schemas.modes import RecipeMetrics

RECIPE = Recipe(
    name="instructir",
    summary="a benchmark: each query under several users' instructions, its positive revised for each",
    paper="Oh et al., INSTRUCTIR: A Benchmark for Instruction Following of Information Retrieval Models (2024), "
    "and its release kaistAI/InstructIR",
    settings=InstructIRParams,
    stages="ifsynth.flows.recipes.instructir.recipe:stages",
    metrics=RecipeMetrics(ndcg=(10,), mrr=(10,), robustness=10),
    differences=DIFFERENCES,
    imports={"instructir": "ifsynth.warehouse.imports:read_instructir"},
    card="ifsynth.flows.recipes.instructir.export:card",
)
