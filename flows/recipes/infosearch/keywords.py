"""Keyword condition extraction: the LLM names one keyword central to a document that narrows its query.

The rules stage then rejects stop words, generic words, keywords absent from the document and keywords
its sibling documents share (document_rules.py).
"""

from __future__ import annotations

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter, llm_stage, pages_where
from ifsynth.schemas.answers import KeywordCondition
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.warehouse.keys import item_id

STAGE = "keywords"


def extract_keywords(ctx: RunContext, order: int, *, source: str, max_tokens: int) -> StageCounts:
    def wanted(item: ItemRecord) -> bool:
        return item.kind == "document" and item.payload.get("condition") is None

    def build(document: ItemRecord) -> list[Ask]:
        payload = document.payload
        prompt = ctx.prompts.render(ctx.template(STAGE), query=payload["query"], passage=payload["passage"])
        return [Ask(prompt, KeywordCondition, "generator", ctx.params.temperature, max_tokens)]

    def handle(writer: StageWriter, document: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or not isinstance(reply.value, KeywordCondition):
            return writer.failed(document.item_id, reply)
        keyword = reply.value.keyword
        item = ItemRecord(
            run_id=ctx.run_id,
            item_id=item_id("keyword", [document.item_id], keyword),
            stage=STAGE,
            kind="document",
            group_id=document.group_id,
            parent_ids=(document.item_id,),
            payload={**document.payload, "condition": keyword, "keyword_reason": reply.value.explanation},
            call_keys=tuple(reply.keys),
            ord=document.ord,
        )
        return Outcome("pass", items=[item])

    return llm_stage(
        ctx, STAGE, order, source=source, build=build, handle=handle, pages=pages_where(ctx, source, wanted)
    )
