"""Instruction reversal: the restriction of an instruction turned into its clear negation.

Only the restriction is rewritten; the restated query stays word for word, so the instructed and the
reversed instruction differ in exactly what they ask of the document. A judge then scores how clearly the
reversal negates the instruction (flows/stages/judge.py, template ``judge_reversal``).
"""

from __future__ import annotations

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter, llm_stage
from ifsynth.schemas.answers import Reversal
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.warehouse.keys import item_id

STAGE = "reversal"


def reverse_instructions(ctx: RunContext, order: int, *, source: str, max_tokens: int) -> StageCounts:
    def build(instruction: ItemRecord) -> list[Ask]:
        payload = instruction.payload
        prompt = ctx.prompts.render(
            ctx.template(STAGE),
            query=payload["query"],
            instruction=payload["instruction"],
            restriction=payload["restriction"],
            dimension=payload["dimension"],
        )
        return [Ask(prompt, Reversal, "generator", ctx.params.temperature, max_tokens)]

    def handle(writer: StageWriter, instruction: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or not isinstance(reply.value, Reversal):
            return writer.failed(instruction.item_id, reply)
        payload = instruction.payload
        reversed_instruction = f"{payload['restated_query']} {reply.value.reversed_restriction}"
        item = ItemRecord(
            run_id=ctx.run_id,
            item_id=item_id("reversal", [instruction.item_id], reversed_instruction),
            stage=STAGE,
            kind="reversal",
            group_id=instruction.group_id,
            parent_ids=(instruction.item_id,),
            payload={
                **payload,
                "reversed_restriction": reply.value.reversed_restriction,
                "reversed_instruction": reversed_instruction,
            },
            call_keys=tuple(reply.keys),
            ord=instruction.ord,
        )
        return Outcome("pass", items=[item])

    return llm_stage(ctx, STAGE, order, source=source, build=build, handle=handle)
