"""The InF-IR recipe as a Prefect flow: training tuples (I+, Q+, P+) with a poisoned instruction and a poisoned
query, their negative passages, and a three-way validation judge.

The flavour (general, code, math) is configuration: it picks the answer schemas below and is handed to every
template, which words its request for that kind of seed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

from ifsynth.flows.recipes.infir.judge_tuples import validate_tuples
from ifsynth.flows.recipes.infir.poison import poison as poison_stage
from ifsynth.flows.recipes.infir.tuples import make_tuples
from ifsynth.flows.run.context import context
from ifsynth.flows.run.registry import RECIPES
from ifsynth.flows.stages.assemble import assemble_release, infir_tuple
from ifsynth.flows.stages.instructions import generate_instructions
from ifsynth.flows.stages.rewrite import rewrite_passages
from ifsynth.flows.stages.select import select_seeds
from ifsynth.schemas.answers import instruction_list
from ifsynth.schemas.config import InfIRParams
from ifsynth.schemas.records import ItemRecord, StageCounts


@dataclass(frozen=True)
class Flavour:
    """What a flavour changes in the answers: code instructions (and their poisoned twins) name a language."""

    language: bool = False


FLAVOURS = {"general": Flavour(), "code": Flavour(language=True), "math": Flavour()}


def _params(run_id: str) -> InfIRParams:
    params = context(run_id).params
    assert isinstance(params, InfIRParams)
    return params


def _variables(run_id: str) -> dict[str, Any]:
    return {"flavour": _params(run_id).flavour}


@task(name="select")
def select(run_id: str) -> StageCounts:
    return select_seeds(context(run_id), 1)


@task(name="instructions")
def instructions(run_id: str) -> StageCounts:
    p = _params(run_id)
    flavour = _variables(run_id)

    def variables(seed: ItemRecord) -> dict[str, Any]:
        payload = seed.payload or {}
        return {"query": payload["query"], "passage": payload["passage"], "k": 1} | flavour

    return generate_instructions(
        context(run_id),
        2,
        k=1,
        max_tokens=p.max_tokens_instructions,
        schema=instruction_list(1, language=FLAVOURS[p.flavour].language),
        variables=variables,
        cut_at_newline=True,
    )


@task(name="poison")
def poison(run_id: str) -> StageCounts:
    p = _params(run_id)
    return poison_stage(
        context(run_id),
        3,
        max_tokens=p.max_tokens_poison,
        language=FLAVOURS[p.flavour].language,
        variables=_variables(run_id),
    )


@task(name="rewrite")
def rewrite(run_id: str) -> StageCounts:
    p = _params(run_id)
    flavour = _variables(run_id)

    def target(poisoned: ItemRecord) -> list[dict[str, Any]]:
        """P1- for (I-, Q+) or P2- for (I+, Q-), each written from P+."""
        payload = poisoned.payload or {}
        return [{key: payload[key] for key in ("query", "instruction", "passage")} | flavour]

    return rewrite_passages(context(run_id), 4, max_tokens=p.max_tokens_rewrite, source="poison", targets=target)


@task(name="tuples")
def tuples(run_id: str) -> StageCounts:
    return make_tuples(context(run_id), 5)


@task(name="validate")
def validate(run_id: str) -> StageCounts:
    p = _params(run_id)
    return validate_tuples(
        context(run_id), 6, distractors=p.distractors, max_tokens=p.max_tokens_judge, variables=_variables(run_id)
    )


@task(name="assemble")
def assemble(run_id: str) -> StageCounts:
    templates = [f"infir/{name}" for name in RECIPES["infir"].templates]
    return assemble_release(context(run_id), 7, source="tuples", templates=templates, max_noise=0, add=infir_tuple)


@flow(name="infir", task_runner=ThreadPoolTaskRunner(max_workers=1))
def infir_flow(run_id: str) -> list[StageCounts]:
    """Select, instructions, poison, rewrite, tuples, validate (unless `validate = false`), assemble."""
    stages = [select, instructions, poison, rewrite, tuples]
    stages += [validate] if _params(run_id).validate_ else []
    return [stage(run_id) for stage in [*stages, assemble]]
