"""The recipes ifsynth knows: their parameters, their templates, and where their flow lives.

Flows are named by import path so that choosing a recipe or checking its config never imports Prefect.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ifsynth.flows.exceptions import ConfigError
from ifsynth.schemas.config import InfIRParams, InfoSearchParams, InstructIRParams, RecipeParams


@dataclass(frozen=True)
class Recipe:
    name: str
    params: type[RecipeParams]
    templates: tuple[str, ...]
    flow_path: str

    def flow(self) -> Callable[[str], Any]:
        module, _, attribute = self.flow_path.partition(":")
        return getattr(importlib.import_module(module), attribute)


RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe(
            name="instructir",
            params=InstructIRParams,
            templates=("instructions", "rewrite", "judge_relevance", "judge_specificity"),
            flow_path="ifsynth.flows.recipes.instructir.flow:instructir_flow",
        ),
        Recipe(
            name="infosearch",
            params=InfoSearchParams,
            templates=(
                "keywords",
                "rewrite",
                "judge_rewrite",
                "negatives",
                "judge_negatives",
                "instructions",
                "reversal",
                "judge_reversal",
            ),
            flow_path="ifsynth.flows.recipes.infosearch.flow:infosearch_flow",
        ),
        Recipe(
            name="infir",
            params=InfIRParams,
            templates=("instructions", "poison", "rewrite", "validate"),
            flow_path="ifsynth.flows.recipes.infir.flow:infir_flow",
        ),
    )
}


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ConfigError(f"unknown recipe `{name}`; known: {', '.join(sorted(RECIPES))}")
    return RECIPES[name]
