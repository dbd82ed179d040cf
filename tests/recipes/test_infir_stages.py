"""InF-IR's own stages, called directly: poisoning with its rules, tuples, and the three-way tuple judge."""

from __future__ import annotations

from typing import Any

import pytest

from ifsynth.flows.recipes.infir.judge_tuples import JUDGMENTS, JudgeTuples
from ifsynth.flows.recipes.infir.poison import NEGATIVE_INSTRUCTION, NEGATIVE_QUERY, Poison
from ifsynth.flows.recipes.infir.tuples import tuple_outcome
from ifsynth.flows.run.stage import Env
from ifsynth.flows.stages.judge import labels
from ifsynth.prompts.registry import Prompts
from ifsynth.schemas.answers import CodeInstructionPoisoning, InstructionPoisoning, QueryPoisoning, candidate_pick
from ifsynth.schemas.records import ItemRecord
from ifsynth.warehouse.keys import item_id
from tests.helpers import at, env, item, ok, unusable

POSITIVE = item(
    "instructions", "instruction", query="sort a list in python", instruction="I write Python scripts.",
    passage="Use sorted() to sort a list.", language="Python", ord=1,
)  # fmt: skip
ASPECTS = ["sorting", "lists"]


def poisoned(instruction: str, query: str, *, language: str | None = None) -> tuple[str, list, list]:
    ctx = env("infir", flavour="general" if language is None else "code")
    answers = [
        InstructionPoisoning(aspects=ASPECTS, negative_instruction=instruction)
        if language is None
        else CodeInstructionPoisoning(aspects=ASPECTS, negative_instruction=instruction, language=language),
        QueryPoisoning(aspects=ASPECTS, negative_query=query),
    ]
    replies = [ok(answer, key=f"key-{n}") for n, answer in enumerate(answers)]
    outcome = Poison(max_tokens=256, language=language is not None).handle(at(ctx, "poison"), POSITIVE, replies)
    return outcome.decision, outcome.items, outcome.verdicts


def test_build_asks_for_i_minus_and_q_minus_in_two_calls_with_the_flavour() -> None:
    ctx = env("infir", flavour="code")
    for_instruction, for_query = Poison(max_tokens=256, language=True, variables={"flavour": "code"}).build(
        ctx, POSITIVE
    )
    assert (for_instruction.schema, for_query.schema) == (CodeInstructionPoisoning, QueryPoisoning)
    assert all(a.role == "generator" and a.max_tokens == 256 for a in (for_instruction, for_query))
    assert "programming language" in for_instruction.prompt.messages[-1]["content"]
    assert "programming problem" in for_query.prompt.messages[-1]["content"]
    assert for_instruction.prompt.template == "infir/poison_instruction"
    assert for_query.prompt.template == "infir/poison_query"


def test_a_poisoned_pair_becomes_two_items_each_traced_to_the_positive() -> None:
    decision, (instruction, query), verdicts = poisoned("I write Rust.\nreally", "reverse a list")
    assert decision == "pass"
    assert instruction.item_id == item_id("poisoned_instruction", [POSITIVE.item_id], "I write Rust.")
    assert instruction.payload["role"] == NEGATIVE_INSTRUCTION and instruction.payload["instruction"] == "I write Rust."
    assert query.payload["role"] == NEGATIVE_QUERY and query.payload["query"] == "reverse a list"
    assert query.payload["aspects"] == instruction.payload["aspects"] == ASPECTS
    assert (instruction.call_keys, query.call_keys) == (("key-0",), ("key-1",)), "each traces to its own call"
    assert instruction.payload["instruction_positive"] == "I write Python scripts." and (
        instruction.ord,
        query.ord,
    ) == (1, 2)
    assert [v.judge for v in verdicts] == ["rule:newline"], "the cut at the newline is on record"


def test_a_failed_call_fails_the_pair() -> None:
    ctx = env("infir")
    replies = [ok(InstructionPoisoning(aspects=ASPECTS, negative_instruction="I write Rust.")), unusable()]
    outcome = Poison(max_tokens=256).handle(at(ctx, "poison"), POSITIVE, replies)
    assert outcome.decision == "parse_error" and not outcome.items
    assert [v.call_key for v in outcome.verdicts] == ["key-bad"]


def test_a_negative_that_repeats_its_original_takes_its_sibling_with_it() -> None:
    decision, items, verdicts = poisoned("I write Rust.", "Sort a list in  Python")
    assert decision == "reject" and all(i.status == "rejected" for i in items)
    reasons = {v.item_id: v.reason for v in verdicts if v.judge == "rule:unchanged"}
    assert reasons == {items[1].item_id: "Q- repeats Q+", items[0].item_id: "sibling: Q- repeats Q+"}


def test_a_code_negative_naming_another_language_is_rejected() -> None:
    decision, items, verdicts = poisoned("I write Rust.", "x", language="Rust")
    (rule,) = {v.judge for v in verdicts}
    assert [v.reason for v in verdicts][1].startswith("sibling: ") and items[0].status == "rejected"
    assert decision == "reject" and rule == "rule:language" and "'Rust'" in verdicts[0].reason


def negatives() -> tuple[Env, ItemRecord, ItemRecord]:
    ctx = env("infir")
    shared: dict[str, Any] = {"query_id": "q1", "doc_id": "d1", "query_positive": "qp", "instruction_positive": "ip",
              "instruction_item": "instr-1", "original_passage": "P+"}  # fmt: skip
    first = item("rewrite", "rewrite", role=NEGATIVE_INSTRUCTION, instruction="i-", query="qp", passage="P1-", **shared)
    first = first.model_copy(update={"item_id": "p1", "parent_ids": ("poisoned-i",)})
    second = item("rewrite", "rewrite", role=NEGATIVE_QUERY, instruction="ip", query="q-", passage="P2-", **shared)
    second = second.model_copy(update={"item_id": "p2", "parent_ids": ("poisoned-q",)})
    return ctx, first, second


def test_a_tuple_joins_both_negatives_and_names_every_item_it_holds() -> None:
    ctx, first, second = negatives()
    outcome = tuple_outcome(at(ctx, "tuples"), "q1", {NEGATIVE_INSTRUCTION: first, NEGATIVE_QUERY: second})
    (made,) = outcome.items
    assert made.item_id == item_id("tuple", ["p1", "p2"]) and made.parent_ids == ("p1", "p2") and made.ord == 0
    assert (made.payload["document_positive"], made.payload["hard_negative_document_1"]) == ("P+", "P1-")
    assert made.payload["query_negative"] == "q-" and made.payload["items"]["query_negative"] == "poisoned-q"


def test_a_seed_short_of_a_negative_forms_no_tuple_and_says_which() -> None:
    ctx, first, _ = negatives()
    outcome = tuple_outcome(at(ctx, "tuples"), "q1", {NEGATIVE_INSTRUCTION: first})
    (verdict,) = outcome.verdicts
    assert outcome.decision == "reject" and verdict.judge == "rule:incomplete"
    assert verdict.reason == "seed q1 has no usable negative passage for negative_query"
    assert outcome.rejects == [first.item_id]  # the negative that came through cannot stand alone


TUPLE = item(
    "tuples", "tuple", doc_id="d1", query_positive="qp", instruction_positive="ip", document_positive="P+",
    query_negative="q-", instruction_negative="i-", hard_negative_document_1="P1-", hard_negative_document_2="P2-",
)  # fmt: skip


def test_the_tuple_judge_asks_three_judgments_over_shuffled_candidates() -> None:
    ctx = env("infir")
    pool = (("d1", "P+ again"), ("n1", "noise one"), ("n2", "noise two"), ("n3", "noise three"))
    stage = JudgeTuples(distractors=2, max_tokens=64, pool=pool)
    asks = stage.build(ctx, TUPLE)
    assert len(asks) == 3 and all(a.role == "judge" and a.schema is candidate_pick(labels(5)) for a in asks)
    texts = [a.prompt.messages[-1]["content"] for a in asks]
    assert "Instruction: i-" in texts[1] and "Query: q-" in texts[2]
    assert all("P+ again" not in text for text in texts), "a distractor is never P+"


def test_a_tuple_is_kept_only_when_all_three_judgments_name_the_intended_passage() -> None:
    ctx = env("infir")
    stage = JudgeTuples(distractors=0, max_tokens=64)
    pick = candidate_pick(labels(3))

    def replies(wrong: str | None) -> list:
        out = []
        for judgment, (_, _, intended) in JUDGMENTS.items():
            listed = [name for name, _ in stage.candidates(TUPLE, judgment, ctx.params.seed)]
            gold = listed.index(intended) + 1
            best = gold if judgment != wrong else gold % 3 + 1
            out.append(ok(pick(explanation="because", best=str(best)), key=f"k-{judgment}"))
        return out

    kept = stage.handle(at(ctx, "validate"), TUPLE, replies(None))
    assert kept.decision == "pass" and [v.judge for v in kept.verdicts] == [f"llm:{j}" for j in JUDGMENTS]
    missed = stage.handle(at(ctx, "validate"), TUPLE, replies("negative_query"))
    assert missed.decision == "reject" and [v.decision for v in missed.verdicts] == ["pass", "pass", "reject"]
    broken = stage.handle(at(ctx, "validate"), TUPLE, [*replies(None)[:2], unusable()])
    assert broken.decision == "parse_error" and broken.verdicts[2].reason == "invalid JSON at `score`"


@pytest.mark.parametrize("template", ["infir/poison_instruction", "infir/poison_query"])
def test_both_poisonings_ask_the_papers_structure(template: str) -> None:
    """InF-IR's appendix H poisons I- as it poisons Q-: the passage's two or three core aspects first, then a
    negative that diverges from them (cause and effect reversed among the ways) in at least three significant
    ways; the answer carries the aspects, so the step is taken, not skipped."""
    texts = {"query": "q", "instruction": "i", "passage": "p", "flavour": "general"}
    user = " ".join(Prompts().render(template, **texts).messages[-1]["content"].split())
    for asked in ("two or three central points", "cause and effect swapped", "at least three significant ways"):
        assert asked in user, asked
    assert '"aspects"' in user
