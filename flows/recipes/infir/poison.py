"""Poisoning (InF-IR): from (I+, Q+, P+), two independent calls write an altered instruction I- and an
altered query Q-, each close to its original and misaligned with P+; the paper poisons them separately, so
neither is written in the light of the other. Both calls follow the paper's one structure: name the passage's
two or three core aspects, then diverge from them in at least three significant ways. They become two items,
each the parent of the negative passage written for it, so a negative traces to the poisoned text behind it.

For the code flavour the I- answer also names its programming language; an I- whose language differs from
I+'s is rejected by a rule (a retriever must not learn to tell them apart by language alone)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.flows.stages.text_rules import LANGUAGE, UNCHANGED, first_line, newline_verdicts, same_language, unchanged
from ifsynth.schemas.answers import (
    CodeInstructionPoisoning,
    InstructionPoisoning,
    QueryPoisoning,
    instruction_poisoning,
)
from ifsynth.schemas.infir import PositiveItem
from ifsynth.schemas.records import ItemRecord, Payload

NEGATIVE_INSTRUCTION = "negative_instruction"
NEGATIVE_QUERY = "negative_query"


@dataclass(frozen=True, kw_only=True)
class Poison(LLMStage[ItemRecord]):
    """Two calls per positive (I+, Q+, P+), one for I- and one for Q-; each answer becomes an item, rejected
    with its sibling when either call or a rule fails (a tuple needs both)."""

    reads: ClassVar[type[Payload]] = PositiveItem
    name: str = "poison"
    source: str = "instructions"
    language: bool = False
    variables: Mapping[str, Any] = field(default_factory=dict)

    @property
    def templates(self) -> tuple[str, ...]:
        return ("poison_instruction", "poison_query")

    def build(self, env: Env, positive: ItemRecord) -> list[Ask]:
        read = positive.read(PositiveItem)
        texts = {"query": read.query, "instruction": read.instruction, "passage": read.passage}
        return [
            self.ask(
                env, instruction_poisoning(language=self.language), "poison_instruction", **texts, **self.variables
            ),
            self.ask(env, QueryPoisoning, "poison_query", **texts, **self.variables),
        ]

    def handle(self, env: Env, positive: ItemRecord, replies: list[Reply]) -> Outcome:
        for_instruction, for_query = replies
        answer, for_query_answer = for_instruction.value, for_query.value
        if for_instruction.status != "ok" or not isinstance(answer, InstructionPoisoning):
            return env.failed(positive.item_id, for_instruction)
        if for_query.status != "ok" or not isinstance(for_query_answer, QueryPoisoning):
            return env.failed(positive.item_id, for_query)
        negative_instruction, negative_query = answer.negative_instruction, for_query_answer.negative_query
        base = positive.read(PositiveItem)
        shared = {
            **positive.payload,
            "instruction_positive": base.instruction,
            "query_positive": base.query,
            "instruction_item": positive.item_id,
        }
        instruction, query = first_line(negative_instruction), first_line(negative_query)
        named = {"language": answer.language} if isinstance(answer, CodeInstructionPoisoning) else {}
        poisoned_instruction = env.child(
            positive,
            "poisoned_instruction",
            {
                **shared,
                "role": NEGATIVE_INSTRUCTION,
                "instruction": instruction,
                "aspects": list(answer.aspects),
                **named,
            },
            instruction,
            reply=for_instruction,
            ord=1,
        )
        aspects = list(for_query_answer.aspects)
        poisoned_query = env.child(
            positive,
            "poisoned_query",
            {**shared, "role": NEGATIVE_QUERY, "query": query, "aspects": aspects},
            query,
            reply=for_query,
            ord=2,
        )
        verdicts = newline_verdicts(
            env, poisoned_instruction.item_id, "poisoned instruction", negative_instruction, instruction
        ) + newline_verdicts(env, poisoned_query.item_id, "poisoned query", negative_query, query)
        items = [poisoned_instruction, poisoned_query]
        failed = _broken_rule(base, named, instruction, query, poisoned_instruction, poisoned_query)
        if failed is None:
            return Outcome("pass", items=items, verdicts=verdicts)
        # a tuple needs both negatives, so the sibling goes too: its passage would never be used
        rule, offender, reason = failed
        verdicts += [
            env.verdict(
                item.item_id, "reject", judge=rule, reason=reason if item.item_id == offender else f"sibling: {reason}"
            )
            for item in items
        ]
        items = [item.model_copy(update={"status": "rejected"}) for item in items]
        return Outcome("reject", items=items, verdicts=verdicts, n_out=0)


def _broken_rule(
    base: PositiveItem,
    named: Mapping[str, str],
    instruction: str,
    query: str,
    poisoned_instruction: ItemRecord,
    poisoned_query: ItemRecord,
) -> tuple[str, str, str] | None:
    """The first rule a poisoned pair breaks: (rule, the offending item, why), or None."""
    positive_language = base.language or ""
    if named and not same_language(named["language"], positive_language):
        reason = f"I- names {named['language']!r}, I+ names {positive_language!r}"
        return LANGUAGE, poisoned_instruction.item_id, reason
    if unchanged(instruction, base.instruction):
        return UNCHANGED, poisoned_instruction.item_id, "I- repeats I+"
    if unchanged(query, base.query):
        return UNCHANGED, poisoned_query.item_id, "Q- repeats Q+"
    return None
