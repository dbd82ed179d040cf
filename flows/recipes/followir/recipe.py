"""FollowIR's stages in run order.

Evaluation set (``mode = eval``): select, [shorten, keywords], alter, rejudge, select_alteration, pool,
assemble. Training set (``mode = train``): select, [shorten, keywords], write_documents, judge_documents,
balance, assemble. The bracketed ablation stages run unless ``ablations = false``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from ifsynth.flows.recipes.followir.alteration import SelectAlteration
from ifsynth.flows.recipes.followir.assemble import AssembleFollowIR, AssembleTraining
from ifsynth.flows.recipes.followir.documents import BalancePairs, WriteDocuments, documents_alone
from ifsynth.flows.recipes.followir.pool import PoolTopics
from ifsynth.flows.recipes.followir.settings import FollowIRParams
from ifsynth.flows.recipes.followir.topics import SelectTopics, is_topic
from ifsynth.flows.run.stage import Stage
from ifsynth.flows.seeds import SeedSource, open_source
from ifsynth.flows.stages.instructions import GenerateInstructions
from ifsynth.flows.stages.labels import LabelDocuments, instructions_with_documents
from ifsynth.schemas.answers import InstructionKeywords, ShortCommand, altered_narratives
from ifsynth.schemas.config import RecipeParams
from ifsynth.schemas.followir import Candidate, JudgedDocument, ShortForm, Topic
from ifsynth.schemas.records import ItemRecord


def seed_sources(seeds: str, params: RecipeParams) -> list[SeedSource]:
    """``demo`` means the built-in TREC-style topics, with narratives and graded judgments."""
    return [open_source(seeds, demo=("followir",))]


def topic_variables(k: int, topic: ItemRecord) -> dict[str, Any]:
    p = topic.read(Topic)
    return {"query": p.query, "title": p.title, "description": p.description, "narrative": p.narrative, "k": k}


def rejudged(alteration: ItemRecord, document: ItemRecord) -> dict[str, Any]:
    """What a re-judgment records besides its label: the document's role and grade, the candidate's number."""
    judged = document.read(JudgedDocument)
    return {"role": judged.role, "grade": judged.grade, "candidate": alteration.read(Candidate).k}


def narrative_of(topic: ItemRecord) -> dict[str, Any]:
    p = topic.read(Topic)
    return {"query": p.query, "narrative": p.narrative}


def command_of(short: ItemRecord) -> dict[str, Any]:
    return {"command": short.read(ShortForm).instruction}


@dataclass(frozen=True, kw_only=True)
class Ablation(GenerateInstructions):
    """A shorter form of the narrative, written beside the recipe's main line: a failed call is on record as a
    verdict, but the topic it came from stays ``ok`` for the stages that build the set (its form is just missing)."""

    marks_input = False


def stages(params: RecipeParams) -> list[Stage]:
    assert isinstance(params, FollowIRParams)
    p = params
    ablations: list[Stage] = [
        Ablation(
            name="shorten", schema=ShortCommand, variables=narrative_of, keep=is_topic, max_tokens=p.max_tokens_ablation
        ),
        Ablation(
            name="keywords",
            source="shorten",
            schema=InstructionKeywords,
            variables=command_of,
            max_tokens=p.max_tokens_ablation,
        ),
    ]
    # both judges read documents in the same windows, on the same budget
    judge = partial(
        LabelDocuments, window_words=p.window_words, window_stride=p.window_stride, max_tokens=p.max_tokens_judge
    )
    head: list[Stage] = [SelectTopics(), *(ablations if p.ablations else [])]
    if p.mode == "train":
        return [
            *head,
            WriteDocuments(per_label=p.documents_per_label, keep=is_topic, max_tokens=p.max_tokens_documents),
            judge(name="judge_documents", source="write_documents", pairs=documents_alone, intended=True),
            BalancePairs(),
            AssembleTraining(ablations=p.ablations),
        ]
    return [
        *head,
        GenerateInstructions(
            name="alter",
            k=p.alterations,
            schema=altered_narratives(p.alterations),
            variables=partial(topic_variables, p.alterations),
            keep=is_topic,
            max_tokens=p.max_tokens_alter,
        ),
        judge(
            name="rejudge",
            source="alter",
            pairs=partial(instructions_with_documents, kind="judged"),
            describe=rejudged,
        ),
        SelectAlteration(),
        PoolTopics(),
        AssembleFollowIR(ablations=p.ablations),
    ]
