"""Instruction generation: one call per input, each instruction of the answer an item of its own.

InstructIR asks for k scenarios per seed; InfoSearch for one two-sentence instruction per (query, condition).
They differ only in template variables and answer schema: the schema's ``entries()`` says what each
instruction item adds to the payload. InF-IR also cuts each instruction at its first newline, on record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ifsynth.flows.llm.gateway import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter, llm_stage
from ifsynth.flows.stages.text_rules import first_line, newline_verdicts
from ifsynth.schemas.answers import Answer, instruction_list
from ifsynth.schemas.records import ItemRecord, StageCounts, VerdictRecord
from ifsynth.warehouse.keys import item_id

STAGE = "instructions"

Variables = Callable[[ItemRecord], dict[str, Any]]


def generate_instructions(
    ctx: RunContext,
    order: int,
    *,
    k: int = 1,
    max_tokens: int,
    source: str = "select",
    schema: type[Answer] | None = None,
    variables: Variables | None = None,
    pages: Iterable[list[ItemRecord]] | None = None,
    cut_at_newline: bool = False,
) -> StageCounts:
    """By default InstructIR's: ``k`` instructions from (query, passage), answered as an instruction list."""
    answer = schema or instruction_list(k)

    def default_variables(seed: ItemRecord) -> dict[str, Any]:
        payload = seed.payload or {}
        return {"query": payload["query"], "passage": payload["passage"], "k": k}

    render_variables = variables or default_variables

    def build(seed: ItemRecord) -> list[Ask]:
        prompt = ctx.prompts.render(ctx.template(STAGE), **render_variables(seed))
        return [Ask(prompt, answer, "generator", ctx.params.temperature, max_tokens)]

    def handle(writer: StageWriter, seed: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or reply.value is None:
            return writer.failed(seed.item_id, reply)
        items: list[ItemRecord] = []
        verdicts: list[VerdictRecord] = []
        for number, entry in enumerate(reply.value.entries(), 1):  # type: ignore[attr-defined]
            generated = entry["instruction"]
            text = first_line(generated) if cut_at_newline else generated
            instruction_id = item_id("instruction", [seed.item_id], number, text)
            verdicts += newline_verdicts(writer, instruction_id, "instruction", generated, text)
            items.append(
                ItemRecord(
                    run_id=ctx.run_id,
                    item_id=instruction_id,
                    stage=STAGE,
                    kind="instruction",
                    group_id=seed.group_id,
                    parent_ids=(seed.item_id,),
                    payload={**(seed.payload or {}), **entry, "instruction": text, "k": number},
                    call_keys=tuple(reply.keys),
                    ord=seed.ord + number,
                )
            )
        return Outcome("pass", items=items, verdicts=verdicts)

    return llm_stage(ctx, STAGE, order, source=source, build=build, handle=handle, pages=pages)
