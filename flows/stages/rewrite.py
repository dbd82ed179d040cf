"""Document rewrite: revise a passage for one target, after a short plan.

InstructIR rewrites the positive for one instruction; InfoSearch rewrites a seed passage into each condition
its seed lacks (a layman's version, a blog post, one sentence, Chinese, ...). A ``targets`` function gives
the template variables of each rewrite an input asks for; they are also kept in the rewrite's payload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ifsynth.flows.llm.gateway import Ask, Reply
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter, llm_stage
from ifsynth.schemas.answers import Rewrite
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.warehouse.keys import item_id

STAGE = "rewrite"

Targets = Callable[[ItemRecord], list[dict[str, Any]]]


def _instruction_target(instruction: ItemRecord) -> list[dict[str, Any]]:
    payload = instruction.payload or {}
    return [{"query": payload["query"], "instruction": payload["instruction"], "passage": payload["passage"]}]


def rewrite_passages(
    ctx: RunContext,
    order: int,
    *,
    max_tokens: int,
    source: str = "instructions",
    targets: Targets = _instruction_target,
    pages: Iterable[list[ItemRecord]] | None = None,
) -> StageCounts:
    def build(item: ItemRecord) -> list[Ask]:
        return [
            Ask(
                ctx.prompts.render(ctx.template(STAGE), **target),
                Rewrite,
                "generator",
                ctx.params.temperature,
                max_tokens,
            )
            for target in targets(item)
        ]

    def handle(writer: StageWriter, item: ItemRecord, replies: list[Reply]) -> Outcome:
        wanted = targets(item)
        many = len(wanted) > 1
        items, failures = [], []
        for number, (target, reply) in enumerate(zip(wanted, replies, strict=True)):
            if reply.status != "ok" or not isinstance(reply.value, Rewrite):
                failures.append(writer.failed(item.item_id, reply))
                continue
            text = reply.value.revised_passage
            items.append(
                ItemRecord(
                    run_id=ctx.run_id,
                    item_id=item_id("rewrite", [item.item_id], *([number] if many else []), text),
                    stage=STAGE,
                    kind="rewrite",
                    group_id=item.group_id,
                    parent_ids=(item.item_id,),
                    payload={
                        **(item.payload or {}),
                        **{key: value for key, value in target.items() if key != "passage"},
                        "original_passage": (item.payload or {})["passage"],
                        "passage": text,
                        "plan": reply.value.plan,
                    },
                    call_keys=tuple(reply.keys),
                    ord=item.ord + number,
                )
            )
        if failures and not items:
            return failures[0]
        return Outcome("pass", items=items, verdicts=[v for failure in failures for v in failure.verdicts])

    return llm_stage(ctx, STAGE, order, source=source, build=build, handle=handle, pages=pages)
