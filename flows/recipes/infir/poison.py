"""Poisoning (InF-IR): from (I+, Q+, P+), one call writes an altered instruction I- and an altered query Q-,
each close to its original and misaligned with P+. They become two items, each the parent of the negative
passage written for it, so a negative traces to the poisoned text behind it.

For the code flavour the answer also names I-'s programming language; an I- whose language differs from
I+'s is rejected by a rule (a retriever must not learn to tell them apart by language alone)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter, llm_stage
from ifsynth.flows.stages.text_rules import LANGUAGE, UNCHANGED, first_line, newline_verdicts, same_language, unchanged
from ifsynth.schemas.answers import CodePoisoning, Poisoning, poisoning
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.warehouse.keys import item_id

STAGE = "poison"
NEGATIVE_INSTRUCTION = "negative_instruction"
NEGATIVE_QUERY = "negative_query"


def poison(
    ctx: RunContext,
    order: int,
    *,
    max_tokens: int,
    language: bool = False,
    source: str = "instructions",
    variables: Mapping[str, Any] | None = None,
) -> StageCounts:
    schema = poisoning(language=language)
    extra = dict(variables or {})

    def build(positive: ItemRecord) -> list[Ask]:
        payload = positive.payload
        prompt = ctx.prompts.render(
            ctx.template(STAGE),
            query=payload["query"],
            instruction=payload["instruction"],
            passage=payload["passage"],
            **extra,
        )
        return [Ask(prompt, schema, "generator", ctx.params.temperature, max_tokens)]

    def handle(writer: StageWriter, positive: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or not isinstance(reply.value, Poisoning):
            return writer.failed(positive.item_id, reply)
        answer = reply.value
        base = dict(positive.payload)
        shared = {
            **base,
            "instruction_positive": base["instruction"],
            "query_positive": base["query"],
            "instruction_item": positive.item_id,
            "aspects": list(answer.aspects),
        }
        instruction, query = first_line(answer.negative_instruction), first_line(answer.negative_query)
        named = {"language": answer.language} if isinstance(answer, CodePoisoning) else {}
        poisoned_instruction = ItemRecord(
            run_id=ctx.run_id,
            item_id=item_id("poisoned_instruction", [positive.item_id], instruction),
            stage=STAGE,
            kind="poisoned_instruction",
            group_id=positive.group_id,
            parent_ids=(positive.item_id,),
            payload={**shared, "role": NEGATIVE_INSTRUCTION, "instruction": instruction, **named},
            call_keys=tuple(reply.keys),
            ord=1,
        )
        poisoned_query = ItemRecord(
            run_id=ctx.run_id,
            item_id=item_id("poisoned_query", [positive.item_id], query),
            stage=STAGE,
            kind="poisoned_query",
            group_id=positive.group_id,
            parent_ids=(positive.item_id,),
            payload={**shared, "role": NEGATIVE_QUERY, "query": query},
            call_keys=tuple(reply.keys),
            ord=2,
        )
        verdicts = newline_verdicts(
            writer, poisoned_instruction.item_id, "poisoned instruction", answer.negative_instruction, instruction
        ) + newline_verdicts(writer, poisoned_query.item_id, "poisoned query", answer.negative_query, query)
        items = [poisoned_instruction, poisoned_query]
        failed: tuple[str, str, str] | None = None  # rule, the offending item, why
        if named and not same_language(named["language"], base.get("language", "")):
            reason = f"I- names {named['language']!r}, I+ names {base.get('language', '')!r}"
            failed = (LANGUAGE, poisoned_instruction.item_id, reason)
        elif unchanged(instruction, base["instruction"]):
            failed = (UNCHANGED, poisoned_instruction.item_id, "I- repeats I+")
        elif unchanged(query, base["query"]):
            failed = (UNCHANGED, poisoned_query.item_id, "Q- repeats Q+")
        if failed is not None:
            # a tuple needs both negatives, so the sibling goes too: its passage would never be used
            rule, offender, reason = failed
            verdicts += [
                writer.verdict(
                    item.item_id,
                    "reject",
                    judge=rule,
                    reason=reason if item.item_id == offender else f"sibling: {reason}",
                )
                for item in items
            ]
            items = [item.model_copy(update={"status": "rejected"}) for item in items]
            return Outcome("reject", items=items, verdicts=verdicts, n_out=0)
        return Outcome("pass", items=items, verdicts=verdicts)

    return llm_stage(ctx, STAGE, order, source=source, build=build, handle=handle)
