"""Query negatives: documents that share a core query's words and topic but cannot answer it.

As in the paper, the model sees the core query alone, and each core query gets ``per_positive`` negatives for
each of its positives (its corpus holds about four documents per instructed query)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.run.stage import Env, LLMStage, Outcome
from ifsynth.schemas.answers import QueryNegatives, query_negatives
from ifsynth.schemas.infosearch import CoreQuery, QueryNegative
from ifsynth.schemas.records import ItemRecord, Payload


def core_query(item: ItemRecord) -> bool:
    return item.kind == "query"


@dataclass(frozen=True, kw_only=True)
class GenerateNegatives(LLMStage[ItemRecord]):
    """One call per core query asks for ``per_positive`` negatives per positive; each becomes a ``negative``
    item of the query."""

    reads: ClassVar[type[Payload]] = CoreQuery
    name: str = "negatives"
    source: str = "collect"
    per_positive: int
    keep: Callable[[ItemRecord], bool] | None = core_query

    def build(self, env: Env, core: ItemRecord) -> list[Ask]:
        query = core.read(CoreQuery)
        n = self.per_positive * len(query.conditions)
        return [self.ask(env, query_negatives(n), query=query.query, n=n)]

    def handle(self, env: Env, core: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        answer = reply.answer(QueryNegatives)
        query = core.read(CoreQuery)
        items = [
            env.child(
                core,
                "negative",
                QueryNegative(
                    dimension=query.dimension, query_id=query.query_id, query=query.query, passage=text, number=number
                ),
                number,
                text,
                reply=reply,
                ord=number,
            )
            for number, text in enumerate(answer.passages, 1)
        ]
        return Outcome("pass", items=items)
