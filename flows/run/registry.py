"""The recipes ifsynth knows: their parameters, their templates, their stages and where their flow lives.

Stages and flows are named by import path so that choosing a recipe or checking its config imports neither
Prefect nor the gateway.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ifsynth.schemas.config import (
    FollowIRParams,
    IFIRParams,
    InfIRParams,
    InfoSearchParams,
    InstructIRParams,
    RecipeParams,
)
from ifsynth.schemas.errors import ConfigError

if TYPE_CHECKING:  # stage modules import the gateway; a registry lookup must not
    from ifsynth.flows.run.stage import Stage
    from ifsynth.flows.seeds import SeedSource


@dataclass(frozen=True)
class Recipe:
    name: str
    params: type[RecipeParams]
    templates: tuple[str, ...]
    paper: str

    @property
    def package(self) -> str:
        return f"ifsynth.flows.recipes.{self.name}"

    def flow(self) -> Callable[..., Any]:
        """The recipe's Prefect flow, ``<name>_flow`` in its package's ``flow`` module."""
        return getattr(importlib.import_module(f"{self.package}.flow"), f"{self.name}_flow")

    def seed_sources(self, seeds: str, params: RecipeParams) -> list[SeedSource]:
        """Every seed source a run reads: the run's, or those its recipe names (``seed_sources`` in its
        ``recipe`` module: InfoSearch reads one per dimension)."""
        module = importlib.import_module(f"{self.package}.recipe")
        if hasattr(module, "seed_sources"):
            return list(module.seed_sources(seeds, params))
        from ifsynth.flows.seeds import open_source

        return [open_source(seeds)]

    def source(self, seeds: str, params: RecipeParams) -> SeedSource:
        """The source a run's stages read (``ctx.source``): the one its recipe names (FollowIR's demo topics), else
        the run's."""
        sources = self.seed_sources(seeds, params)
        if len(sources) == 1:
            return sources[0]
        from ifsynth.flows.seeds import open_source

        return open_source(seeds)

    def stages(self, params: RecipeParams, *, sharded: bool = False) -> list[Stage]:
        """The recipe's stages in run order, configured by ``params``; a stage's ordinal is its place here.
        A shard's run (``sharded``) takes those before the first stage that needs every seed (``Stage.whole``)."""
        stages: list[Stage] = importlib.import_module(f"{self.package}.recipe").stages(params)
        if not sharded:
            return stages
        cut = next((at for at, stage in enumerate(stages) if at and stage.whole), len(stages))
        return stages[:cut]


RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        Recipe(
            name="instructir",
            params=InstructIRParams,
            templates=("instructions", "rewrite", "judge_relevance", "judge_specificity"),
            paper="Oh et al., INSTRUCTIR: A Benchmark for Instruction Following of Information Retrieval Models "
            "(2024), and its release kaistAI/InstructIR",
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
            paper="Zhou et al., Beyond Content Relevance: Evaluating Instruction Following in Retrieval Models "
            "(InfoSearch, 2024)",
        ),
        Recipe(
            name="infir",
            params=InfIRParams,
            templates=("instructions", "poison_instruction", "poison_query", "rewrite", "validate"),
            paper="Towards Better Instruction Following Retrieval Models (InF-IR, 2025)",
        ),
        Recipe(
            name="followir",
            params=FollowIRParams,
            templates=("alter", "judge", "shorten", "keywords", "write_documents"),
            paper="Weller et al., FollowIR: Evaluating and Teaching Information Retrieval Models to Follow "
            "Instructions (2024), and its release jhu-clsp/FollowIR",
        ),
        Recipe(
            name="ifir",
            params=IFIRParams,
            templates=("level", "judge_level", "recheck"),
            paper="Song et al., IFIR: A Comprehensive Benchmark for Evaluating Instruction-Following in Expert-Domain "
            "Information Retrieval (2025)",
        ),
    )
}


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ConfigError(f"unknown recipe `{name}`; known: {', '.join(sorted(RECIPES))}")
    return RECIPES[name]
