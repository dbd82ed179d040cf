"""FollowIR's training set: for each (query, narrative), the LLM writes documents meant to be relevant and
documents meant not to be; a judge labels each (``labels.py``); ``balance`` keeps, per pair, one relevant and
one non-relevant document whose judged label agrees with the intended one. A pair with only one of them keeps
it, as the release did (about 1,800 rows over about 1,200 pairs); ``pair_needs=both`` drops such a pair."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from ifsynth.flows.llm.requests import Ask, Reply
from ifsynth.flows.recipes.followir.settings import FollowIRParams
from ifsynth.flows.recipes.followir.topics import is_topic
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, LLMStage, Outcome, RuleStage
from ifsynth.schemas.answers import SyntheticDocuments, synthetic_documents
from ifsynth.schemas.followir import SyntheticDocument, Topic, TrainingPair
from ifsynth.schemas.records import ItemRecord, Payload


@dataclass(frozen=True, kw_only=True)
class WriteDocuments(LLMStage[ItemRecord]):
    name: str = "write_documents"
    source: str = "select"
    per_label: int = 2
    reads: ClassVar[type[Payload]] = Topic

    def build(self, env: Env, topic: ItemRecord) -> list[Ask]:
        p = topic.read(Topic)
        return [
            self.ask(env, synthetic_documents(self.per_label), query=p.query, narrative=p.narrative, n=self.per_label)
        ]

    def handle(self, env: Env, topic: ItemRecord, replies: list[Reply]) -> Outcome:
        (reply,) = replies
        answer = reply.answer(SyntheticDocuments)
        written = [(1, text) for text in answer.relevant] + [(0, text) for text in answer.non_relevant]
        p = topic.read(Topic)
        items = [
            env.child(
                topic,
                "document",
                SyntheticDocument(
                    query_id=p.query_id,
                    query=p.query,
                    instruction=p.narrative,
                    passage=text,
                    label=label,
                    number=number,
                ),
                number,
                text,
                reply=reply,
                ord=number,
            )
            for number, (label, text) in enumerate(written, 1)
        ]
        return Outcome("pass", items=items)


@dataclass(frozen=True)
class Agreed:
    """A topic with, per intended label (1 relevant, 0 not), its first document the judge agreed with."""

    topic: ItemRecord
    documents: dict[int, ItemRecord]


@dataclass(frozen=True, kw_only=True)
class BalancePairs(RuleStage[Agreed]):
    """Per topic of ``source``: the first relevant and the first non-relevant document of ``documents`` that the
    judge agreed with become a training pair; a topic short of either is rejected with what it lacked."""

    name: str = "balance"
    source: str = "select"
    documents: str = "write_documents"
    reads: ClassVar[type[Payload]] = Topic

    def inputs(self, ctx: RunContext) -> list[list[Agreed]]:
        agreed: dict[str, dict[int, ItemRecord]] = {}
        for page in ctx.warehouse.items(ctx.run_id, self.documents):
            for item in sorted(page, key=lambda item: item.read(SyntheticDocument).number):
                agreed.setdefault(item.group_id, {}).setdefault(item.read(SyntheticDocument).label, item)
        topics = [item for page in ctx.warehouse.items(ctx.run_id, self.source) for item in page if is_topic(item)]
        return [[Agreed(topic, agreed.get(topic.group_id, {})) for topic in topics]]

    def decide(self, env: Env, page: list[Agreed]) -> Iterable[Decided]:
        return [(entry.topic.item_id, balance(env, entry)) for entry in page]


def balance(env: Env, entry: Agreed) -> Outcome:
    """The topic's training pair, or its rejection naming the document it lacks."""
    topic, kept = entry.topic, entry.documents
    assert isinstance(env.params, FollowIRParams)
    if len(kept) == 2 or (kept and env.params.pair_needs == "one"):
        documents = {field: kept[label] for label, field in ((1, "positive"), (0, "negative")) if label in kept}
        p = topic.read(Topic)
        payload = TrainingPair(
            query_id=p.query_id,
            query=p.query,
            instruction=p.narrative,
            **{field: document.read(SyntheticDocument).passage for field, document in documents.items()},
            items={field: document.item_id for field, document in documents.items()},
        )
        return Outcome("pass", items=[env.child(topic, "training_pair", payload, parents=list(documents.values()))])
    lacking = " and ".join(name for label, name in ((1, "relevant"), (0, "non-relevant")) if label not in kept)
    reason = f"balance: no {lacking} document that the judge agreed with"
    threshold = 2 if env.params.pair_needs == "both" else 1
    verdict = env.verdict(topic.item_id, "reject", judge="rule", reason=reason, score=len(kept), threshold=threshold)
    return Outcome("reject", verdicts=[verdict], n_out=0)


def documents_alone(ctx: RunContext, source: str) -> list[list[tuple[ItemRecord, ItemRecord]]]:
    """Every synthetic document of ``source``, judged against its own query and narrative."""
    return [[(item, item) for item in page] for page in ctx.warehouse.items(ctx.run_id, source)]
