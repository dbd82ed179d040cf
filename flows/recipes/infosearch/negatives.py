"""Query negatives: documents that share a core query's words and topic but cannot answer it."""

from __future__ import annotations

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter, llm_stage, pages_where
from ifsynth.schemas.answers import QueryNegatives, query_negatives
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.warehouse.keys import item_id

STAGE = "negatives"


def generate_negatives(ctx: RunContext, order: int, *, source: str, n: int, max_tokens: int) -> StageCounts:
    schema = query_negatives(n)

    def build(core: ItemRecord) -> list[Ask]:
        payload = core.payload
        prompt = ctx.prompts.render(
            ctx.template(STAGE), query=payload["query"], passage=payload["passages"][0]["text"], n=n
        )
        return [Ask(prompt, schema, "generator", ctx.params.temperature, max_tokens)]

    def handle(writer: StageWriter, core: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or not isinstance(reply.value, QueryNegatives):
            return writer.failed(core.item_id, reply)
        payload = core.payload
        items = [
            ItemRecord(
                run_id=ctx.run_id,
                item_id=item_id("negative", [core.item_id], number, text),
                stage=STAGE,
                kind="negative",
                group_id=core.group_id,
                parent_ids=(core.item_id,),
                payload={
                    "dimension": payload["dimension"],
                    "query_id": payload["query_id"],
                    "query": payload["query"],
                    "passage": text,
                    "number": number,
                },
                call_keys=tuple(reply.keys),
                ord=number,
            )
            for number, text in enumerate(reply.value.passages, 1)
        ]
        return Outcome("pass", items=items)

    pages = pages_where(ctx, source, lambda item: item.kind == "query")
    return llm_stage(ctx, STAGE, order, source=source, build=build, handle=handle, pages=pages)
