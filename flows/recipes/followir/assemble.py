"""FollowIR assembly.

Evaluation set: each pooled topic becomes one query in two modes sharing its id (the topic id): ``og`` with
the original narrative as its instruction, ``changed`` with the kept alteration. Qrels cover every relevant
document and every judged non-relevant one in the pool, with their TREC grades; under ``changed`` the flipped
documents score 0. ``top_ranked`` is the pool, in both modes. The corpus is the union of the pools.

Training set: each balanced pair becomes one query (mode ``train``) with two documents, ``<topic>_rel`` (score
1) and ``<topic>_nonrel`` (score 0).
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.flows.stages.assemble import Rows, publish, release_card
from ifsynth.schemas.followir import PooledTopic, ShortForm, TrainingPair
from ifsynth.schemas.modes import CHANGED, FOLLOWIR_MODES, OG, TRAIN
from ifsynth.schemas.records import ItemRecord, Payload, StageCounts

QRELS_NOTE = [
    "Each topic is one query id in two modes: `og` (the TREC narrative as `instruction_og`) and `changed` (the",
    "altered narrative as `instruction_changed`). Qrels hold the topic's judged documents within its pool, with",
    "their original grades; under `changed` the documents the alteration made non-relevant score 0 (an LLM judge",
    "re-judged every relevant document under the altered narrative). `top_ranked` is each topic's rerank pool.",
]


def ablations_of(ctx: RunContext, ablations: bool) -> dict[str, dict[str, str]]:
    """Per topic, its narrative as a short command (``short_query``) and as keywords, where those stages ran."""
    found: dict[str, dict[str, str]] = {}
    for stage, field in (("shorten", "short_query"), ("keywords", "keywords")) if ablations else ():
        for page in ctx.warehouse.items(ctx.run_id, stage):
            for item in page:
                found.setdefault(item.group_id, {})[field] = item.read(ShortForm).instruction
    return found


@dataclass(frozen=True, kw_only=True)
class Assemble(RuleStage[ItemRecord]):
    """Every ``ok`` item of ``source`` passes into the release, which ``finish`` writes from them all (with each
    topic's short command and keywords when the ablation stages ran)."""

    name: str = "assemble"
    whole: bool = True
    ablations: bool

    def decide(self, env: Env, page: list[ItemRecord]) -> Iterable[Decided]:
        return [(item.item_id, Outcome("pass", n_out=1)) for item in page]

    def finish(self, ctx: RunContext, env: Env, counts: StageCounts) -> None:
        items = [item for page in ctx.warehouse.items(ctx.run_id, self.source) for item in page]
        ctx.warehouse.set_status(ctx.run_id, [item.item_id for item in items], "accepted")
        self.release(ctx, items, ablations_of(ctx, self.ablations), counts)

    @abstractmethod
    def release(
        self, ctx: RunContext, items: list[ItemRecord], forms: dict[str, dict[str, str]], counts: StageCounts
    ) -> None:
        """Write the release of ``items``."""


@dataclass(frozen=True, kw_only=True)
class AssembleFollowIR(Assemble):
    """The evaluation set: every pooled topic in both modes, with its pool."""

    source: str = "pool"
    reads: ClassVar[type[Payload]] = PooledTopic

    def release(
        self, ctx: RunContext, items: list[ItemRecord], forms: dict[str, dict[str, str]], counts: StageCounts
    ) -> None:
        rows, top_ranked = evaluation_rows(items, forms)
        pooled = {doc for topic in items for doc in topic.read(PooledTopic).pool}
        for passage in ctx.source.passages():
            if passage.doc_id in pooled:
                rows.docs.append({"doc_id": passage.doc_id, "title": passage.title, "text": passage.text, "meta": "{}"})
        rows.docs.sort(key=lambda doc: doc["doc_id"])
        card = release_card(
            ctx,
            counts,
            queries=len(items),
            instances=len(items),
            corpus=len(rows.docs),
            qrels=len(rows.qrels),
            top_ranked=len(top_ranked),
            flipped=sum(len(topic.read(PooledTopic).flipped) for topic in items),
        )
        card["notes"] = QRELS_NOTE
        publish(ctx, card, rows.docs, rows.queries, rows.qrels, top_ranked)


def evaluation_rows(topics: list[ItemRecord], forms: dict[str, dict[str, str]]) -> tuple[Rows, list[dict[str, Any]]]:
    """Each topic's queries (``og`` and ``changed``), qrels within its pool and pool (``top_ranked``)."""
    rows, top_ranked = Rows(), []
    for topic in topics:
        p = topic.read(PooledTopic)
        pool = set(p.pool)
        meta = {
            "title": p.title,
            "description": p.description,
            "change": p.change,
            "item": topic.item_id,
            **forms.get(topic.group_id, {}),
        }
        judged = {doc: grade for doc, grade in p.grades.items() if doc in pool}
        flipped = set(p.flipped)
        instructions = {OG: p.instruction_og, CHANGED: p.instruction_changed}
        for mode in FOLLOWIR_MODES:
            rows.queries.append(
                {
                    "mode": mode,
                    "query_id": p.query_id,
                    "group_id": p.query_id,
                    "query": p.query,
                    "instruction": instructions[mode],
                    "meta": json.dumps(meta, sort_keys=True, ensure_ascii=False),
                }
            )
            rows.qrels += [
                {
                    "mode": mode,
                    "query_id": p.query_id,
                    "doc_id": doc,
                    "score": 0 if mode == CHANGED and doc in flipped else grade,
                }
                for doc, grade in sorted(judged.items())
            ]
            top_ranked += [{"mode": mode, "query_id": p.query_id, "doc_id": doc} for doc in sorted(pool)]
    return rows, top_ranked


@dataclass(frozen=True, kw_only=True)
class AssembleTraining(Assemble):
    """The training set: every balanced pair as a query with its relevant and its non-relevant document."""

    source: str = "balance"
    reads: ClassVar[type[Payload]] = TrainingPair

    def release(
        self, ctx: RunContext, items: list[ItemRecord], forms: dict[str, dict[str, str]], counts: StageCounts
    ) -> None:
        rows = training_rows(items, forms)
        card = release_card(ctx, counts, pairs=len(items), rows=len(rows.qrels))
        card["notes"] = [
            "Training rows: per (query, narrative) one relevant and one non-relevant synthetic document, each judged",
            "by the judge model to have the label it was written for; a pair the judge agreed with on one label only",
            "keeps that one row, as FollowIR-train does (`--format followir`: `train.jsonl` and `train.parquet`;",
            "`--format triplets`: anchor `query narrative`, positive, negative, of the pairs that have both).",
        ]
        publish(ctx, card, rows.docs, rows.queries, rows.qrels)


def training_rows(pairs: list[ItemRecord], forms: dict[str, dict[str, str]]) -> Rows:
    """Each pair's query (mode ``train``) and its documents, ``<topic>_rel`` (score 1) and ``<topic>_nonrel``."""
    rows = Rows()
    for pair in pairs:
        p = pair.read(TrainingPair)
        qid = p.query_id
        extra: dict[str, Any] = {"item": pair.item_id, **p.items, **forms.get(pair.group_id, {})}
        rows.queries.append(
            {
                "mode": TRAIN,
                "query_id": qid,
                "group_id": qid,
                "query": p.query,
                "instruction": p.instruction,
                "meta": json.dumps(extra, sort_keys=True, ensure_ascii=False),
            }
        )
        for suffix, field, text, score in (("rel", "positive", p.positive, 1), ("nonrel", "negative", p.negative, 0)):
            if text is None:
                continue
            doc_id = f"{qid}_{suffix}"
            meta = json.dumps({"item": p.items[field], "label": score}, sort_keys=True)
            rows.docs.append({"doc_id": doc_id, "title": "", "text": text, "meta": meta})
            rows.qrels.append({"mode": TRAIN, "query_id": qid, "doc_id": doc_id, "score": score})
    return rows
