"""InfoSearch assembly: complete core queries become a release with three retrieval modes.

A core query enters the release only with, for every condition of its dimension, a document that passed
the rules and judges, its instruction and a reversal that passed its judge, plus at least one query
negative; otherwise a ``complete_core_query`` rule verdict says what it lacked.

Ids: instructed query ``<core>_<n>``, its document ``<core>_doc<n>``, negatives ``<core>_neg<j>``, where
``<core>`` is ``<dimension>-<seed query id>`` and n the condition's position. Qrels, per instructed query,
cover the positives of its core query (one per condition):

- ``og``: the core query alone (empty instruction); every positive scores 1.
- ``changed``: the instruction; only the document of its condition scores 1, its siblings 0.
- ``reversed``: the reversed instruction; the document of its condition scores 0, its siblings 1.

Query negatives are in the corpus and in no qrels row (non-relevant in every mode).
"""

from __future__ import annotations

import json
from typing import Any

from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.flows.stages.assemble import publish, release_card
from ifsynth.schemas.config import InfoSearchParams
from ifsynth.schemas.records import ItemRecord, StageCounts

STAGE = "assemble"
MODES = ("og", "changed", "reversed")
QRELS_NOTE = [
    "Qrels per mode, for each instructed query (one per core query and condition), over the positives of its",
    "core query (one per condition of the dimension):",
    "",
    "- `og`: the core query alone (`instruction_og` is empty); every positive scores 1.",
    "- `changed`: query + `instruction_changed`; only the document of its condition scores 1, its siblings 0.",
    "- `reversed`: query + `instruction_reversed`; the document of its condition scores 0, its siblings 1.",
    "",
    "Query negatives are in the corpus and in no qrels row: non-relevant in every mode.",
]


def _grouped(ctx: RunContext, stage: str, kind: str | None = None) -> dict[str, list[ItemRecord]]:
    groups: dict[str, list[ItemRecord]] = {}
    for page in ctx.warehouse.items(ctx.run_id, stage):
        for item in page:
            if kind is None or item.kind == kind:
                groups.setdefault(item.group_id, []).append(item)
    return groups


def assemble_infosearch(ctx: RunContext, order: int, *, reversals: str, negatives: str) -> StageCounts:
    params = ctx.params
    assert isinstance(params, InfoSearchParams)
    cores = _grouped(ctx, "collect", "query")
    finished, made = _grouped(ctx, reversals), _grouped(ctx, negatives, "negative")
    writer = StageWriter(ctx, STAGE, order, total=len(cores))
    docs: list[dict[str, Any]] = []
    queries: list[dict[str, Any]] = []
    qrels: list[dict[str, Any]] = []
    accepted: list[str] = []
    per_dimension: dict[str, dict[str, int]] = {}
    for group_id in sorted(cores):
        (core,) = cores[group_id]
        payload = core.payload
        dimension, required = payload["dimension"], len(payload["conditions"])
        by_position: dict[int, ItemRecord] = {}
        for item in finished.get(group_id, []):
            by_position.setdefault(item.payload["position"], item)
        negative_items = made.get(group_id, [])
        missing = [n for n in range(1, required + 1) if n not in by_position]
        if missing or not negative_items:
            reason = (
                f"complete_core_query: {len(by_position)} of {required} conditions complete"
                + (f" (missing positions {missing})" if missing else "")
                + f"; {len(negative_items)} query negatives, at least 1 needed"
            )
            verdict = writer.verdict(
                core.item_id, "reject", judge="rule", reason=reason, score=len(by_position), threshold=required
            )
            writer.add(core.item_id, Outcome("reject", verdicts=[verdict], n_out=0))
            continue
        positives = [by_position[n] for n in range(1, required + 1)]
        _release_rows(group_id, dimension, positives, negative_items, docs, queries, qrels)
        accepted += [item.item_id for item in positives]
        tally = per_dimension.setdefault(dimension, {"core": 0, "instructed": 0, "negatives": 0})
        tally["core"] += 1
        tally["instructed"] += len(positives)
        tally["negatives"] += len(negative_items)
        writer.add(core.item_id, Outcome("pass", n_out=len(positives)))
        ctx.progress.advance(STAGE)
    writer.mark(accepted, "accepted")
    counts = writer.close()

    card = release_card(
        ctx,
        counts,
        core_queries=sum(t["core"] for t in per_dimension.values()),
        instructed_queries=sum(t["instructed"] for t in per_dimension.values()),
        reversed_queries=sum(t["instructed"] for t in per_dimension.values()),
        corpus=len(docs),
        query_negatives=sum(t["negatives"] for t in per_dimension.values()),
    )
    card["dimensions"] = {
        name: {**tally, "public_name": params.dimension_specs[name].public_name}
        for name, tally in sorted(per_dimension.items())
    }
    card["notes"] = [
        "| dimension | public task | core queries | instructed queries | query negatives |",
        "|---|---|---:|---:|---:|",
        *(
            f"| {name} | {t['public_name']}-v1 | {t['core']} | {t['instructed']} | {t['negatives']} |"
            for name, t in card["dimensions"].items()
        ),
        "",
        *QRELS_NOTE,
    ]
    publish(ctx, card, docs, queries, qrels)
    return counts


def _release_rows(
    core: str,
    dimension: str,
    positives: list[ItemRecord],
    negatives: list[ItemRecord],
    docs: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    qrels: list[dict[str, Any]],
) -> None:
    def meta(**fields: Any) -> str:
        return json.dumps({"dimension": dimension, **fields}, sort_keys=True, ensure_ascii=False)

    for item in positives:
        p = item.payload
        docs.append(
            {
                "doc_id": f"{core}_doc{p['position']}",
                "title": p.get("title", "") if p["origin"] == "seed" else "",
                "text": p["passage"],
                "meta": meta(
                    condition=p["condition"],
                    role="positive",
                    origin=p["origin"],
                    origin_doc_id=p["doc_id"],
                    item=item.item_id,
                ),
            }
        )
    for item in negatives:
        p = item.payload
        docs.append(
            {
                "doc_id": f"{core}_neg{p['number']}",
                "title": "",
                "text": p["passage"],
                "meta": meta(condition=None, role="query_negative", item=item.item_id),
            }
        )
    for item in positives:
        p = item.payload
        query_id, own = f"{core}_{p['position']}", p["position"]
        instructions = {"og": "", "changed": p["instruction"], "reversed": p["reversed_instruction"]}
        for mode in MODES:
            queries.append(
                {
                    "mode": mode,
                    "query_id": query_id,
                    "group_id": core,
                    "query": p["query"],
                    "instruction": instructions[mode],
                    "meta": meta(condition=p["condition"], item=item.item_id),
                }
            )
            for other in positives:
                position = other.payload["position"]
                score = {"og": 1, "changed": int(position == own), "reversed": int(position != own)}[mode]
                qrels.append({"mode": mode, "query_id": query_id, "doc_id": f"{core}_doc{position}", "score": score})
