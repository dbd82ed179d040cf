"""The shared kinds as each stage writes them and the next one reads them: a seed selected, its instructions,
their rewrites, InF-IR's poisoned texts, negatives and tuple, each read through its model, and a payload
short of a field its reader needs fails naming that field."""

from __future__ import annotations

from functools import partial

import pytest
from pydantic import ValidationError

from ifsynth.flows.recipes.infir.poison import NEGATIVE_INSTRUCTION, NEGATIVE_QUERY, Poison
from ifsynth.flows.recipes.infir.recipe import instruction_variables, negative_target
from ifsynth.flows.recipes.infir.tuples import tuple_outcome
from ifsynth.flows.stages.instructions import GenerateInstructions
from ifsynth.flows.stages.rewrite import RewritePassages
from ifsynth.flows.stages.select import Bands, Candidate, SelectSeeds
from ifsynth.schemas.answers import InstructionPoisoning, QueryPoisoning, Rewrite, instruction_list
from ifsynth.schemas.infir import NegativeItem, PoisonedItem, TupleItem
from ifsynth.schemas.payloads import InstructionItem, RewriteItem, SeedItem
from ifsynth.schemas.records import ItemRecord
from ifsynth.schemas.seeds import SeedPair, SeedPassage, SeedQuery
from tests.helpers import at, env, ok

PAIR = SeedPair(
    query=SeedQuery(query_id="q1", text="what is a tide"),
    positives=(SeedPassage(doc_id="d1", title="Tides", text="Tides rise and fall."),),
)


def seed(recipe: str) -> ItemRecord:
    """The pair selected in a run of ``recipe``: every length inside the bands, the passage outside too."""
    e = at(env(recipe, passage_band="outside"), "select")
    ((_, outcome),) = SelectSeeds(bands=Bands((0, 100), (200, 300))).decide(e, [Candidate(PAIR, drawn=True)])
    return outcome.items[0]


def rewritten(recipe: str, parent: ItemRecord, stage: RewritePassages) -> ItemRecord:
    e = at(env(recipe), "rewrite")
    assert len(stage.build(e, parent)) == 1  # its target read through the parent's model
    (rewrite,) = stage.handle(e, parent, [ok(Rewrite(plan="plan", revised_passage=f"Written for {parent.kind}"))]).items
    return rewrite


def test_instructir_kinds_read_through_their_models() -> None:
    selected = seed("instructir")
    assert selected.read(SeedItem).positives == ("d1",) and selected.read(SeedItem).title == "Tides"
    answer = instruction_list(1)(instructions=["I sail at dawn."])
    (instruction,) = GenerateInstructions(max_tokens=64).handle(at(env(), "instructions"), selected, [ok(answer)]).items
    assert instruction.read(InstructionItem).instruction == "I sail at dawn."
    read = rewritten("instructir", instruction, RewritePassages(max_tokens=64)).read(RewriteItem)
    assert (read.query_id, read.doc_id, read.k) == ("q1", "d1", 1)
    assert (read.original_passage, read.passage, read.plan) == (
        "Tides rise and fall.",
        "Written for instruction",
        "plan",
    )


def test_infir_kinds_read_through_their_models_up_to_the_tuple() -> None:
    e = env("infir")
    instructions = GenerateInstructions(
        max_tokens=64, schema=instruction_list(1), variables=partial(instruction_variables, "general")
    )
    answer = instruction_list(1)(instructions=["I sail at dawn."])
    (positive,) = instructions.handle(at(e, "instructions"), seed("infir"), [ok(answer)]).items
    poisoned = Poison(max_tokens=64).handle(
        at(e, "poison"), positive,
        [ok(InstructionPoisoning(aspects=["tides", "sea"], negative_instruction="I fly at dusk.")),
         ok(QueryPoisoning(aspects=["tides", "sea"], negative_query="what is a wave"))],
    ).items  # fmt: skip
    assert [item.read(PoisonedItem).role for item in poisoned] == [NEGATIVE_INSTRUCTION, NEGATIVE_QUERY]
    negatives = RewritePassages(source="poison", max_tokens=64, targets=partial(negative_target, "general"))
    first, second = (rewritten("infir", item, negatives) for item in poisoned)
    assert first.read(NegativeItem).original_passage == "Tides rise and fall." and first.read(NegativeItem).k == 1
    outcome = tuple_outcome(at(e, "tuples"), "q1", {NEGATIVE_INSTRUCTION: first, NEGATIVE_QUERY: second})
    made = outcome.items[0].read(TupleItem)
    assert (made.query_id, made.instruction_negative, made.query_negative) == ("q1", "I fly at dusk.", "what is a wave")
    assert made.items["instruction_positive"] == positive.item_id and made.language is None


def test_a_payload_short_of_a_field_its_reader_needs_names_it() -> None:
    selected = seed("instructir")
    broken = selected.model_copy(update={"payload": {k: v for k, v in selected.payload.items() if k != "query"}})
    with pytest.raises(ValidationError, match="query\n  Field required"):
        GenerateInstructions(max_tokens=64).build(env(), broken)
