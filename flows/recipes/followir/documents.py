"""FollowIR's training set: for each (query, narrative), the LLM writes documents meant to be relevant and
documents meant not to be; a judge labels each (``labels.py``); ``balance`` keeps, per pair, one relevant and
one non-relevant document whose judged label agrees with the intended one."""

from __future__ import annotations

from dataclasses import dataclass

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Env, LLMStage, Outcome, StageWriter
from ifsynth.schemas.answers import SyntheticDocuments, synthetic_documents
from ifsynth.schemas.records import ItemRecord, StageCounts


@dataclass(frozen=True, kw_only=True)
class WriteDocuments(LLMStage[ItemRecord]):
    name: str = "write_documents"
    source: str = "select"
    per_label: int = 2

    def build(self, env: Env, topic: ItemRecord) -> list[Ask]:
        payload = topic.payload
        return [
            self.ask(
                env,
                synthetic_documents(self.per_label),
                query=payload["query"],
                narrative=payload["narrative"],
                n=self.per_label,
            )
        ]

    def handle(self, env: Env, topic: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        if reply.status != "ok" or not isinstance(reply.value, SyntheticDocuments):
            return env.failed(topic.item_id, reply)
        written = [(1, text) for text in reply.value.relevant] + [(0, text) for text in reply.value.non_relevant]
        items = [
            env.child(
                topic,
                "document",
                {
                    "query_id": topic.payload["query_id"],
                    "query": topic.payload["query"],
                    "instruction": topic.payload["narrative"],
                    "passage": text,
                    "label": label,
                    "number": number,
                },
                number,
                text,
                reply=reply,
                ord=number,
            )
            for number, (label, text) in enumerate(written, 1)
        ]
        return Outcome("pass", items=items)


def balance_pairs(ctx: RunContext, order: int, *, stage: str, source: str, documents: str) -> StageCounts:
    """Per topic of ``source``: the first relevant and the first non-relevant document of ``documents`` that the
    judge agreed with become a training pair; a topic short of either is rejected with what it lacked."""
    agreed: dict[str, dict[int, ItemRecord]] = {}
    for page in ctx.warehouse.items(ctx.run_id, documents):
        for item in sorted(page, key=lambda item: item.payload["number"]):
            agreed.setdefault(item.group_id, {}).setdefault(item.payload["label"], item)
    topics = [item for page in ctx.warehouse.items(ctx.run_id, source) for item in page if item.kind == "topic"]
    writer = StageWriter(ctx, stage, order, total=len(topics))
    chosen: list[str] = []
    for topic in topics:
        kept = agreed.get(topic.group_id, {})
        if 0 in kept and 1 in kept:
            positive, negative = kept[1], kept[0]
            payload = {
                "query_id": topic.payload["query_id"],
                "query": topic.payload["query"],
                "instruction": topic.payload["narrative"],
                "positive": positive.payload["passage"],
                "negative": negative.payload["passage"],
                "items": {"positive": positive.item_id, "negative": negative.item_id},
            }
            pair = writer.child(topic, "training_pair", payload, parents=[positive, negative])
            chosen += [positive.item_id, negative.item_id]
            writer.add(topic.item_id, Outcome("pass", items=[pair]))
        else:
            lacking = " and ".join(name for label, name in ((1, "relevant"), (0, "non-relevant")) if label not in kept)
            reason = f"balance: no {lacking} document that the judge agreed with"
            verdict = writer.verdict(topic.item_id, "reject", judge="rule", reason=reason, score=len(kept), threshold=2)
            writer.add(topic.item_id, Outcome("reject", verdicts=[verdict], n_out=0))
        ctx.progress.advance(stage)
    return writer.close()


def documents_alone(ctx: RunContext, source: str) -> list[list[tuple[ItemRecord, ItemRecord]]]:
    """Every synthetic document of ``source``, judged against its own query and narrative."""
    return [[(item, item) for item in page] for page in ctx.warehouse.items(ctx.run_id, source)]
