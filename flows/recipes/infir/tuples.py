"""Tuples (InF-IR): the positive (I+, Q+, P+) joined with its two negatives (I-, Q+, P1-) and (I+, Q-, P2-).

A tuple is an item whose parents are the two negative passages, so `show` leads from it to every text it
holds; a seed whose poisoning or rewrites did not all come through forms no tuple, and says why."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from ifsynth.flows.recipes.infir.poison import NEGATIVE_INSTRUCTION, NEGATIVE_QUERY
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.infir import NegativeItem
from ifsynth.schemas.records import ItemRecord, Payload

Negatives = tuple[str, dict[str, ItemRecord]]  # a seed's group and its negative passages by role


@dataclass(frozen=True, kw_only=True)
class MakeTuples(RuleStage[Negatives]):
    """One tuple per seed from its two negative passages (every status: a failed one says why none formed)."""

    reads: ClassVar[type[Payload]] = NegativeItem
    name: str = "tuples"
    source: str = "rewrite"

    def total(self, ctx: RunContext) -> int:
        return ctx.warehouse.count_groups(ctx.run_id, self.source)

    def inputs(self, ctx: RunContext) -> Iterator[list[Negatives]]:
        for page in ctx.warehouse.items(ctx.run_id, self.source, status=None):
            members: dict[str, dict[str, ItemRecord]] = {}
            for item in page:
                members.setdefault(item.group_id, {})[item.read(NegativeItem).role] = item
            yield list(members.items())

    def decide(self, env: Env, page: list[Negatives]) -> Iterable[Decided]:
        return [(None, tuple_outcome(env, group, roles)) for group, roles in page]


def tuple_outcome(env: Env, group: str, roles: dict[str, ItemRecord]) -> Outcome:
    """A seed's tuple from its two negative passages, or the seed's rejection when one is missing."""
    first, second = roles.get(NEGATIVE_INSTRUCTION), roles.get(NEGATIVE_QUERY)
    if first is None or second is None or first.status != "ok" or second.status != "ok":
        missing = [
            role
            for role, item in ((NEGATIVE_INSTRUCTION, first), (NEGATIVE_QUERY, second))
            if item is None or item.status != "ok"
        ]
        reason = f"seed {group} has no usable negative passage for {' and '.join(missing)}"
        present = [item for item in (first, second) if item is not None and item.status == "ok"]
        verdicts = [
            env.verdict(item.item_id, "reject", judge="rule:incomplete", reason=reason, rule="both negatives")
            for item in present
        ]
        return Outcome("reject", verdicts=verdicts, n_out=0, rejects=[item.item_id for item in present])
    one, two = first.read(NegativeItem), second.read(NegativeItem)
    payload: dict[str, Any] = {  # a ``TupleItem``, its keys in the order the warehouse has always held them
        "query_id": one.query_id,
        "doc_id": one.doc_id,
        "title": one.title,
        "query_positive": one.query_positive,
        "instruction_positive": one.instruction_positive,
        "document_positive": one.original_passage,
        "query_negative": two.query,
        "instruction_negative": one.instruction,
        "hard_negative_document_1": one.passage,
        "hard_negative_document_2": two.passage,
        "items": {
            "instruction_positive": one.instruction_item,
            "instruction_negative": first.parent_ids[0],
            "query_negative": second.parent_ids[0],
            "hard_negative_document_1": first.item_id,
            "hard_negative_document_2": second.item_id,
        },
    }
    if two.language is not None:  # the language I+ names (the negative query's item keeps I+)
        payload["language"] = two.language
    return Outcome("pass", items=[env.child(first, "tuple", payload, parents=[second], ord=0)])
