"""Instruction negatives in the manner of Promptriever (Weller et al., 2025), as an ifsynth recipe of its own
package: its declaration and settings here, its stages in ``stages.py``, its export in ``export.py``, its
templates in ``promptriever/`` and its demo seeds in ``demo_seeds/``. ifsynth finds it through the
``ifsynth.recipes`` entry point in this package's ``pyproject.toml``."""

from pydantic import Field

from ifsynth.flows.run.registry import Recipe
from ifsynth.schemas.config import Band, SeedSelection


class PromptrieverSettings(SeedSelection):
    """Every seed with one positive is used (no length bands); the generator writes ``negatives`` passages per
    instruction, and the judge keeps those that answer the query and fail the instruction."""

    query_length_percentiles: tuple[float, float] = (0.0, 100.0)
    passage_length_percentiles: tuple[float, float] = (0.0, 100.0)
    passage_band: Band = "inside"
    negatives: int = Field(3, ge=1, le=10, description="instruction negatives written per query")
    max_tokens_instructions: int = Field(512, ge=16)
    max_tokens_negatives: int = Field(2048, ge=16)
    max_tokens_judge: int = Field(256, ge=16)


RECIPE = Recipe(
    name="promptriever",
    summary="training triplets: a query under an instruction its positive meets, and passages that fail it",
    paper="Weller et al., Promptriever: Instruction-Trained Retrievers Can Be Prompted Like Language Models (2025)",
    settings=PromptrieverSettings,
    stages="ifsynth_promptriever.stages:stages",
    prompts="ifsynth_promptriever",
    demo="ifsynth_promptriever",
    exports={"triplets": "ifsynth_promptriever.export:write_triplets"},
)
