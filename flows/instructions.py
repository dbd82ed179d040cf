"""Instruction generation: k instructions for one seed in one call, each an item of its own."""

from __future__ import annotations

from ifsynth.flows.context import RunContext
from ifsynth.flows.llm import Ask, Reply
from ifsynth.flows.stage import Outcome, StageWriter, llm_stage
from ifsynth.schemas.answers import instruction_list
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.warehouse.keys import item_id

STAGE = "instructions"


def generate_instructions(
    ctx: RunContext, order: int, *, k: int, max_tokens: int, source: str = "select"
) -> StageCounts:
    schema = instruction_list(k)

    def build(seed: ItemRecord) -> list[Ask]:
        payload = seed.payload or {}
        prompt = ctx.prompts.render(ctx.template(STAGE), query=payload["query"], passage=payload["passage"], k=k)
        return [Ask(prompt, schema, "generator", ctx.params.temperature, max_tokens)]

    def handle(writer: StageWriter, seed: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or reply.value is None:
            return writer.failed(seed.item_id, reply)
        items = [
            ItemRecord(
                run_id=ctx.run_id,
                item_id=item_id("instruction", [seed.item_id], number, text),
                stage=STAGE,
                kind="instruction",
                group_id=seed.group_id,
                parent_ids=(seed.item_id,),
                payload={**(seed.payload or {}), "instruction": text, "k": number},
                call_keys=tuple(reply.keys),
                ord=number,
            )
            for number, text in enumerate(reply.value.instructions, 1)  # type: ignore[attr-defined]
        ]
        return Outcome("pass", items=items)

    return llm_stage(ctx, STAGE, order, source=source, build=build, handle=handle)
