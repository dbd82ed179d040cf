"""Document rewrite: revise a passage for one target, after a short plan.

InstructIR rewrites the positive for one instruction; InfoSearch rewrites a seed passage into each condition
its seed lacks (a layman's version, a blog post, one sentence, Chinese, ...); InF-IR writes a negative passage
for a poisoned instruction or query. A ``targets`` function gives the template variables of each rewrite an
input asks for; they are also kept in the rewrite's payload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.schemas.answers import Rewrite
from ifsynth.schemas.payloads import InstructedPassage, PassageItem
from ifsynth.schemas.records import ItemRecord, Payload

Targets = Callable[[ItemRecord], list[dict[str, Any]]]


def instruction_target(instruction: ItemRecord) -> list[dict[str, Any]]:
    """InstructIR's one target: the positive passage revised for the instruction's user."""
    read = instruction.read(InstructedPassage)
    return [{"query": read.query, "instruction": read.instruction, "passage": read.passage}]


@dataclass(frozen=True, kw_only=True)
class RewritePassages(LLMStage[ItemRecord]):
    """One call per target of an input; each answer becomes a ``rewrite`` item holding the revised passage."""

    reads: ClassVar[type[Payload]] = PassageItem  # ``targets`` reads what its recipe's kind holds
    name: str = "rewrite"
    source: str = "instructions"
    targets: Targets = instruction_target

    def build(self, env: Env, item: ItemRecord) -> list[Ask]:
        return [self.ask(env, Rewrite, **target) for target in self.targets(item)]

    def handle(self, env: Env, item: ItemRecord, replies: list[Reply]) -> Outcome:
        wanted = self.targets(item)
        many = len(wanted) > 1
        original = item.read(PassageItem).passage
        items, failures = [], []
        for number, (target, reply) in enumerate(zip(wanted, replies, strict=True)):
            if reply.status != "ok" or not isinstance(reply.value, Rewrite):
                failures.append(env.failed(item.item_id, reply))
                continue
            text = reply.value.revised_passage
            payload = {
                **item.payload,
                **{key: value for key, value in target.items() if key != "passage"},
                "original_passage": original,
                "passage": text,
                "plan": reply.value.plan,
            }
            id_parts = [number, text] if many else [text]
            items.append(env.child(item, "rewrite", payload, *id_parts, reply=reply, ord=item.ord + number))
        if failures and not items:
            return failures[0]
        return Outcome("pass", items=items, verdicts=[v for failure in failures for v in failure.verdicts])
