"""The rerank pool of each kept topic: all its judged-relevant documents plus the top non-relevant ones of each
ranker: BM25 over the seed corpus for the topic's query (the release's pool: BM25's top 1000) and any TREC run
files the user passes (``pool_runs``; the paper pooled five retrievers). Unjudged documents count as
non-relevant, as in TREC."""

from __future__ import annotations

from ifsynth.flows.evaluation.metrics import ranking
from ifsynth.flows.evaluation.retrieval import Run, bm25, read_run
from ifsynth.flows.recipes.followir.settings import FollowIRParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.schemas.records import StageCounts


def pool_topics(ctx: RunContext, order: int, *, stage: str, source: str) -> StageCounts:
    params = ctx.params
    assert isinstance(params, FollowIRParams)
    topics = [item for page in ctx.warehouse.items(ctx.run_id, source) for item in page]
    writer = StageWriter(ctx, stage, order, total=len(topics))
    if not topics:
        return writer.close()
    queries = {topic.group_id: topic.payload["query"] for topic in topics}
    depth = params.pool_depth + max(len(topic.payload["relevant"]) for topic in topics)
    docs = [(p.doc_id, f"{p.title} {p.text}".strip()) for p in ctx.source.passages()]
    rankers: dict[str, Run] = {"bm25": bm25(docs, queries, depth=depth)}
    rankers |= {path: read_run(path) for path in params.pool_runs}
    known = {doc_id for doc_id, _ in docs}
    for topic in topics:
        relevant = set(topic.payload["relevant"])
        pooled, sources = set(relevant), {}
        for name, run in rankers.items():
            others = [doc for doc in ranking(run.get(topic.group_id, {})) if doc not in relevant and doc in known]
            sources[name] = len(set(others[: params.pool_depth]) - pooled)
            pooled |= set(others[: params.pool_depth])
        payload = {**topic.payload, "pool": sorted(pooled), "pool_sources": sources}
        writer.add(topic.item_id, Outcome("pass", items=[writer.child(topic, "pool", payload)]))
        ctx.progress.advance(stage)
    return writer.close()
