"""InF-IR's stages in run order: select, instructions, poison, rewrite, tuples, validate (unless
`validate = false`), assemble.

The flavour (general, code, math) is configuration: it picks the answer schemas and is handed to every
template, which words its request for that kind of seed."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from ifsynth.flows.recipes.infir.judge_tuples import JudgeTuples
from ifsynth.flows.recipes.infir.poison import Poison
from ifsynth.flows.recipes.infir.settings import InfIRParams
from ifsynth.flows.recipes.infir.tuples import MakeTuples
from ifsynth.flows.run.stage import Stage
from ifsynth.flows.stages.assemble import AssembleTuples
from ifsynth.flows.stages.instructions import GenerateInstructions
from ifsynth.flows.stages.rewrite import RewritePassages
from ifsynth.flows.stages.select import SelectSeeds
from ifsynth.schemas.answers import instruction_list
from ifsynth.schemas.config import RecipeParams
from ifsynth.schemas.infir import PoisonedItem
from ifsynth.schemas.payloads import SeedItem
from ifsynth.schemas.records import ItemRecord


@dataclass(frozen=True)
class Flavour:
    """What a flavour changes in the answers: code instructions (and their poisoned twins) name a language."""

    language: bool = False


FLAVOURS = {"general": Flavour(), "code": Flavour(language=True), "math": Flavour()}


def instruction_variables(flavour: str, seed: ItemRecord) -> dict[str, Any]:
    read = seed.read(SeedItem)
    return {"query": read.query, "passage": read.passage, "k": 1, "flavour": flavour}


def negative_target(flavour: str, poisoned: ItemRecord) -> list[dict[str, Any]]:
    """P1- for (I-, Q+) or P2- for (I+, Q-), each written from P+."""
    read = poisoned.read(PoisonedItem)
    return [{"query": read.query, "instruction": read.instruction, "passage": read.passage, "flavour": flavour}]


def stages(params: RecipeParams) -> list[Stage]:
    assert isinstance(params, InfIRParams)
    p, language = params, FLAVOURS[params.flavour].language
    flavour = {"flavour": p.flavour}
    validate = JudgeTuples(distractors=p.distractors, max_tokens=p.max_tokens_judge, variables=flavour)
    return [
        SelectSeeds(),
        GenerateInstructions(
            max_tokens=p.max_tokens_instructions,
            schema=instruction_list(1, language=language),
            variables=partial(instruction_variables, p.flavour),
            cut_at_newline=True,
        ),
        Poison(max_tokens=p.max_tokens_poison, language=language, variables=flavour),
        RewritePassages(source="poison", max_tokens=p.max_tokens_rewrite, targets=partial(negative_target, p.flavour)),
        MakeTuples(),
        *([validate] if p.validate_ else []),
        AssembleTuples(),
    ]
