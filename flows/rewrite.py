"""Document rewrite: revise the positive passage for one instruction, after a short plan."""

from __future__ import annotations

from ifsynth.flows.context import RunContext
from ifsynth.flows.llm import Ask, Reply
from ifsynth.flows.stage import Outcome, StageWriter, llm_stage
from ifsynth.schemas.answers import Rewrite
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.warehouse.keys import item_id

STAGE = "rewrite"


def rewrite_passages(ctx: RunContext, order: int, *, max_tokens: int, source: str = "instructions") -> StageCounts:
    def build(instruction: ItemRecord) -> list[Ask]:
        payload = instruction.payload or {}
        prompt = ctx.prompts.render(
            ctx.template(STAGE),
            query=payload["query"],
            instruction=payload["instruction"],
            passage=payload["passage"],
        )
        return [Ask(prompt, Rewrite, "generator", ctx.params.temperature, max_tokens)]

    def handle(writer: StageWriter, instruction: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or not isinstance(reply.value, Rewrite):
            return writer.failed(instruction.item_id, reply)
        rewrite = ItemRecord(
            run_id=ctx.run_id,
            item_id=item_id("rewrite", [instruction.item_id], reply.value.revised_passage),
            stage=STAGE,
            kind="rewrite",
            group_id=instruction.group_id,
            parent_ids=(instruction.item_id,),
            payload={
                **(instruction.payload or {}),
                "original_passage": (instruction.payload or {})["passage"],
                "passage": reply.value.revised_passage,
                "plan": reply.value.plan,
            },
            call_keys=tuple(reply.keys),
            ord=instruction.ord,
        )
        return Outcome("pass", items=[rewrite])

    return llm_stage(ctx, STAGE, order, source=source, build=build, handle=handle)
