"""Assembly: surviving rewrites become instances, untouched seed passages become noise, all frozen as a
release with its card. Ids follow InstructIR's release: ``<qid>_<k>`` and ``<pid>_<k>``, k counted from 1
within each query after filtering."""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ifsynth.flows.context import RunContext
from ifsynth.flows.llm import public_url
from ifsynth.flows.stage import Outcome, StageWriter
from ifsynth.schemas.records import StageCounts
from ifsynth.warehouse.keys import sha256

STAGE = "assemble"
MODE = "instructed"


def assemble_release(
    ctx: RunContext, order: int, *, source: str, templates: Sequence[str], max_noise: int
) -> StageCounts:
    writer = StageWriter(ctx, STAGE, order, total=ctx.warehouse.count_items(ctx.run_id, source))
    docs: list[dict[str, Any]] = []
    queries: list[dict[str, Any]] = []
    qrels: list[dict[str, Any]] = []
    used_passages: set[str] = set()
    accepted: list[str] = []
    for page in ctx.warehouse.items(ctx.run_id, source):
        numbers: dict[str, int] = {}
        for item in page:
            payload = item.payload or {}
            number = numbers[item.group_id] = numbers.get(item.group_id, 0) + 1
            query_id, doc_id = f"{payload['query_id']}_{number}", f"{payload['doc_id']}_{number}"
            used_passages.add(payload["doc_id"])
            provenance = {
                "item": item.item_id,
                "origin_query_id": payload["query_id"],
                "origin_doc_id": payload["doc_id"],
            }
            docs.append(
                {
                    "doc_id": doc_id,
                    "title": payload.get("title", ""),
                    "text": payload["passage"],
                    "meta": json.dumps(provenance, sort_keys=True),
                }
            )
            queries.append(
                {
                    "mode": MODE,
                    "query_id": query_id,
                    "group_id": payload["query_id"],
                    "query": payload["query"],
                    "instruction": payload["instruction"],
                    "meta": json.dumps(provenance, sort_keys=True),
                }
            )
            qrels.append({"mode": MODE, "query_id": query_id, "doc_id": doc_id, "score": 1})
            accepted.append(item.item_id)
            writer.add(item.item_id, Outcome("pass", n_out=1))
            ctx.progress.advance(STAGE)
    writer.mark(accepted, "accepted")

    noise = heapq.nsmallest(
        max_noise,
        (p for p in ctx.source.passages() if p.doc_id not in used_passages),
        key=lambda p: sha256(f"{ctx.params.seed}:{p.doc_id}"),
    )
    for passage in sorted(noise, key=lambda p: p.doc_id):
        docs.append(
            {
                "doc_id": passage.doc_id,
                "title": passage.title,
                "text": passage.text,
                "meta": json.dumps({"noise": True}),
            }
        )
    counts = writer.close()

    card = _card(
        ctx,
        templates,
        counts,
        instances=len(queries),
        queries=len({q["group_id"] for q in queries}),
        corpus=len(docs),
        noise=len(noise),
    )
    ctx.warehouse.write_release(
        name=ctx.warehouse.run(ctx.run_id).name,
        run_id=ctx.run_id,
        recipe=ctx.recipe,
        source=ctx.config.seeds,
        card=card,
        docs=pa.Table.from_pylist(docs, schema=_schema("doc_id", "title", "text", "meta")),
        queries=pa.Table.from_pylist(
            queries, schema=_schema("mode", "query_id", "group_id", "query", "instruction", "meta")
        ),
        qrels=pa.Table.from_pylist(
            qrels,
            schema=pa.schema(
                [("mode", pa.string()), ("query_id", pa.string()), ("doc_id", pa.string()), ("score", pa.int32())]
            ),
        ),
    )
    return counts


def _schema(*names: str) -> pa.Schema:
    return pa.schema([(name, pa.string()) for name in names])


def _card(ctx: RunContext, templates: Sequence[str], assemble: StageCounts, **counts: int) -> dict[str, Any]:
    """What a reader of the release needs to know; nothing that differs between identical runs."""
    config = ctx.config
    stages = ctx.warehouse.sql(
        "SELECT stage, n_in, n_out, rejected, parse_error, failed FROM stage_counts WHERE run_id = ? ORDER BY ord",
        [ctx.run_id],
    )
    stages = [row for row in stages if row["stage"] != STAGE]
    stages.append(assemble.model_dump(include={"stage", "n_in", "n_out", "rejected", "parse_error", "failed"}))
    return {
        "recipe": ctx.recipe,
        "seeds": config.seeds,
        "limit": config.limit,
        "models": {"generator": config.model_for("generator"), "judge": config.model_for("judge")},
        "endpoints": {
            role: {
                "base_url": public_url(config.endpoint_for(role).base_url),
                "structured_output": config.endpoint_for(role).structured_output,
            }
            for role in ("generator", "judge")
        },
        "templates": {name: ctx.prompts.hash(name) for name in templates},
        "params": ctx.params.model_dump(mode="json"),
        "counts": counts,
        "stages": stages,
    }
