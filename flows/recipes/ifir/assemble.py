"""IFIR assembly: each kept query becomes one release query per kept level (mode ``level<n>``, the same id
in every level), with the passages relevant at that level as its qrels; the corpus is every passage of the
subsets' seed corpora, so a retriever searches all of it, as in IFIR."""

from __future__ import annotations

import json
from collections import Counter

from ifsynth.flows.recipes.ifir.select import subset_source
from ifsynth.flows.recipes.ifir.settings import IFIRParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.flows.stages.assemble import Rows, publish, release_card
from ifsynth.schemas.ifir import level_mode, release_id
from ifsynth.schemas.records import StageCounts

NOTES = [
    "Each seed query is one query id in up to three modes, `level1` to `level3`: level 1 is the domain's generic",
    "ask, each level above keeps every condition of the one below and adds more (an LLM judge checked that). An LLM",
    "judge re-checked every originally relevant passage against each level; qrels hold the passages still relevant,",
    "nested: every level-3 passage is relevant at level 2, every level-2 one at level 1. A level left without a",
    "relevant passage was dropped with the levels above it.",
]


def assemble_ifir(ctx: RunContext, order: int, *, stage: str, source: str) -> StageCounts:
    params = ctx.params
    assert isinstance(params, IFIRParams)
    groups = [item for page in ctx.warehouse.items(ctx.run_id, source) for item in page]
    writer = StageWriter(ctx, stage, order, total=len(groups))
    rows, per_level = Rows(), Counter[str]()
    for group in groups:
        p = group.payload
        for level in p["levels"]:
            mode = level_mode(level["level"])
            per_level[mode] += 1
            meta = {
                "domain": p["domain"],
                "subset": p["subset"],
                "level": level["level"],
                "seed_query_id": p["seed_query_id"],
                "relevant": p["relevant"],
                "item": level["item"],
            }
            rows.queries.append(
                {
                    "mode": mode,
                    "query_id": p["query_id"],
                    "group_id": p["query_id"],
                    "query": p["query"],
                    "instruction": level["instruction"],
                    "meta": json.dumps(meta, sort_keys=True, ensure_ascii=False),
                }
            )
            rows.qrels += [
                {"mode": mode, "query_id": p["query_id"], "doc_id": doc, "score": 1} for doc in level["relevant"]
            ]
        writer.add(group.item_id, Outcome("pass", n_out=1))
        ctx.progress.advance(stage)
    writer.mark([group.item_id for group in groups], "accepted")
    for subset, scheme in params.chosen.items():
        for passage in subset_source(ctx.config.seeds, params, subset).passages():
            meta = json.dumps(
                {"domain": scheme.domain, "subset": subset, "seed_doc_id": passage.doc_id}, sort_keys=True
            )
            rows.docs.append(
                {
                    "doc_id": release_id(subset, passage.doc_id),
                    "title": passage.title,
                    "text": passage.text,
                    "meta": meta,
                }
            )
    rows.docs.sort(key=lambda doc: doc["doc_id"])
    counts = writer.close()
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
    return counts
