"""IFIR assembly: each kept query becomes one release query per kept level (mode ``level<n>``, the same id
in every level), with the passages relevant at that level as its qrels; the corpus is every passage of the
subsets' seed corpora, so a retriever searches all of it, as in IFIR."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from ifsynth.flows.recipes.ifir.select import subset_source
from ifsynth.flows.recipes.ifir.settings import IFIRParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.flows.stages.assemble import Rows, publish, release_card
from ifsynth.schemas.ifir import QueryLevels, Scheme, level_mode, release_id
from ifsynth.schemas.records import ItemRecord, Payload, StageCounts
from ifsynth.schemas.seeds import SeedPassage

NOTES = [
    "Each seed query is one query id in up to three modes, `level1` to `level3`: level 1 is the domain's generic",
    "ask, each level above keeps every condition of the one below and adds more (an LLM judge checked that). An LLM",
    "judge re-checked every originally relevant passage against each level; qrels hold the passages still relevant,",
    "nested: every level-3 passage is relevant at level 2, every level-2 one at level 1. A level left without a",
    "relevant passage was dropped with the levels above it.",
]


@dataclass(frozen=True, kw_only=True)
class AssembleIFIR(RuleStage[ItemRecord]):
    """Every query's nested levels (the ``group`` items of ``source``) and the subsets' corpora, as the release."""

    name: str = "assemble"
    source: str = "nest"
    whole: bool = True
    reads: ClassVar[type[Payload]] = QueryLevels

    def decide(self, env: Env, page: list[ItemRecord]) -> Iterable[Decided]:
        return [(group.item_id, Outcome("pass", n_out=1)) for group in page]

    def finish(self, ctx: RunContext, env: Env, counts: StageCounts) -> None:
        params = ctx.params
        assert isinstance(params, IFIRParams)
        groups = [item for page in ctx.warehouse.items(ctx.run_id, self.source) for item in page]
        ctx.warehouse.set_status(ctx.run_id, [group.item_id for group in groups], "accepted")
        rows, per_level = release_rows(groups)
        for subset, scheme in params.chosen.items():
            rows.docs += corpus_rows(subset, scheme, subset_source(ctx.config.seeds, params, subset).passages())
        rows.docs.sort(key=lambda doc: doc["doc_id"])
        card = release_card(
            ctx,
            counts,
            queries=len(groups),  # one per seed query, in up to three modes
            instances=len(groups),
            corpus=len(rows.docs),
            qrels=len(rows.qrels),
            **{f"queries_{mode}": n for mode, n in sorted(per_level.items())},
        )
        card["notes"] = NOTES
        publish(ctx, card, rows.docs, rows.queries, rows.qrels)


def release_rows(groups: list[ItemRecord]) -> tuple[Rows, Counter[str]]:
    """Each query's release rows, one query per kept level with that level's qrels; and the queries per level."""
    rows, per_level = Rows(), Counter[str]()
    for group in groups:
        p = group.read(QueryLevels)
        for level in p.levels:
            mode = level_mode(level.level)
            per_level[mode] += 1
            meta = {
                "domain": p.domain,
                "subset": p.subset,
                "level": level.level,
                "seed_query_id": p.seed_query_id,
                "relevant": p.relevant,
                "item": level.item,
            }
            rows.queries.append(
                {
                    "mode": mode,
                    "query_id": p.query_id,
                    "group_id": p.query_id,
                    "query": p.query,
                    "instruction": level.instruction,
                    "meta": json.dumps(meta, sort_keys=True, ensure_ascii=False),
                }
            )
            rows.qrels += [{"mode": mode, "query_id": p.query_id, "doc_id": doc, "score": 1} for doc in level.relevant]
    return rows, per_level


def corpus_rows(subset: str, scheme: Scheme, passages: Iterable[SeedPassage]) -> list[dict[str, Any]]:
    """A subset's seed corpus, every passage named by its release id."""
    return [
        {
            "doc_id": release_id(subset, passage.doc_id),
            "title": passage.title,
            "text": passage.text,
            "meta": json.dumps(
                {"domain": scheme.domain, "subset": subset, "seed_doc_id": passage.doc_id}, sort_keys=True
            ),
        }
        for passage in passages
    ]
