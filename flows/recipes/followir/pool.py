"""The rerank pool of each kept topic: all its judged-relevant documents plus the top non-relevant ones of each
ranker: BM25 over the seed corpus for the topic's query (the release's pool: BM25's top 1000) and any TREC run
files the user passes (``pool_runs``; the paper pooled five retrievers). Unjudged documents count as
non-relevant, as in TREC."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from ifsynth.flows.evaluation.metrics import ranking
from ifsynth.flows.evaluation.retrieval import Run, bm25, read_run
from ifsynth.flows.recipes.followir.settings import FollowIRParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.followir import AlteredTopic
from ifsynth.schemas.records import ItemRecord, Payload


@dataclass(frozen=True)
class Ranked:
    """A kept topic and, per ranker, the seed corpus's documents ranked for its query, best first."""

    topic: ItemRecord
    rankings: dict[str, list[str]]


@dataclass(frozen=True, kw_only=True)
class PoolTopics(RuleStage[Ranked]):
    """Every kept topic of ``source`` with its rerank pool: the rankers run over the corpus in ``inputs``."""

    name: str = "pool"
    source: str = "select_alteration"
    whole: bool = True
    reads: ClassVar[type[Payload]] = AlteredTopic

    def inputs(self, ctx: RunContext) -> list[list[Ranked]]:
        params = ctx.params
        assert isinstance(params, FollowIRParams)
        topics = [item for page in ctx.warehouse.items(ctx.run_id, self.source) for item in page]
        if not topics:
            return []
        queries = {topic.group_id: topic.read(AlteredTopic).query for topic in topics}
        depth = params.pool_depth + max(len(topic.read(AlteredTopic).relevant) for topic in topics)
        docs = [(p.doc_id, f"{p.title} {p.text}".strip()) for p in ctx.source.passages()]
        rankers: dict[str, Run] = {"bm25": bm25(docs, queries, depth=depth)}
        rankers |= {path: read_run(path) for path in params.pool_runs}
        known = {doc_id for doc_id, _ in docs}
        return [
            [
                Ranked(
                    topic,
                    {
                        name: [doc for doc in ranking(run.get(topic.group_id, {})) if doc in known]
                        for name, run in rankers.items()
                    },
                )
                for topic in topics
            ]
        ]

    def decide(self, env: Env, page: list[Ranked]) -> Iterable[Decided]:
        params = env.params
        assert isinstance(params, FollowIRParams)
        return [(entry.topic.item_id, pooled(env, entry, params.pool_depth)) for entry in page]


def pooled(env: Env, entry: Ranked, depth: int) -> Outcome:
    """The topic's pool: its relevant documents and each ranker's top ``depth`` others, with what each added."""
    topic = entry.topic
    relevant = set(topic.read(AlteredTopic).relevant)
    pool, sources = set(relevant), {}
    for name, ranked in entry.rankings.items():
        others = [doc for doc in ranked if doc not in relevant][:depth]
        sources[name] = len(set(others) - pool)
        pool |= set(others)
    payload = {**topic.payload, "pool": sorted(pool), "pool_sources": sources}
    return Outcome("pass", items=[env.child(topic, "pool", payload)])
