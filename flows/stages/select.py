"""Seed selection: length bands computed from the seed data itself, exactly one positive, a fixed sample.

Queries are kept inside their band. Passages are kept inside or outside theirs: InstructIR's paper says inside,
its released seeds (1,743 passages, none of length 255-371 characters) were kept outside.

Two passes over the source (lengths, then decisions) keep memory flat on large collections. The sample is
the ``limit`` eligible queries with the smallest hash of (seed, query id): stable under any file order.
"""

from __future__ import annotations

from typing import Literal, Protocol, cast

import numpy as np

from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.schemas.seeds import SeedPair
from ifsynth.warehouse.keys import hash_sample, item_id


class SelectionParams(Protocol):
    """What selection reads from a recipe's parameters (InstructIR's and InF-IR's both carry it)."""

    seed: int
    length_unit: Literal["chars", "words"]
    query_length_percentiles: tuple[float, float]
    passage_length_percentiles: tuple[float, float]
    passage_band: Literal["inside", "outside"]


def length(text: str, unit: Literal["chars", "words"]) -> int:
    return len(text) if unit == "chars" else len(text.split())


def band(values: list[int], percentiles: tuple[float, float]) -> tuple[float, float]:
    if not values:
        return (0.0, 0.0)
    low, high = np.percentile(np.asarray(values), percentiles)
    return float(low), float(high)


def select_seeds(ctx: RunContext, order: int, *, stage: str) -> StageCounts:
    params = cast(SelectionParams, ctx.params)
    unit = params.length_unit
    query_lengths, passage_lengths = [], []
    for pair in ctx.source.pairs():
        query_lengths.append(length(pair.query.text, unit))
        passage_lengths.extend(length(p.text, unit) for p in pair.positives)
    query_band = band(query_lengths, params.query_length_percentiles)
    passage_band = band(passage_lengths, params.passage_length_percentiles)

    writer = StageWriter(ctx, stage, order, total=len(query_lengths))
    eligible: list[SeedPair] = []
    for pair in ctx.source.pairs():
        reasons = _reasons(pair, unit, query_band, passage_band, params)
        seed_id = item_id("seed", [], pair.query.query_id)
        if reasons:
            verdict = writer.verdict(seed_id, "reject", judge="rule", reason="; ".join(reasons))
            writer.add(
                seed_id,
                Outcome("reject", items=[_item(writer, seed_id, pair, "rejected")], verdicts=[verdict], n_out=0),
            )
        else:
            eligible.append(pair)
        ctx.progress.advance(stage)
    keep = len(eligible) if ctx.config.limit is None else ctx.config.limit
    drawn = hash_sample(eligible, keep, key=lambda pair: f"{params.seed}:{pair.query.query_id}")
    chosen = {pair.query.query_id for pair in drawn}
    for pair in eligible:
        seed_id = item_id("seed", [], pair.query.query_id)
        picked = pair.query.query_id in chosen
        writer.add(
            seed_id, Outcome("pass", items=[_item(writer, seed_id, pair, "ok")]) if picked else Outcome("set_aside")
        )
    return writer.close()


def _reasons(
    pair: SeedPair,
    unit: str,
    query_band: tuple[float, float],
    passage_band: tuple[float, float],
    params: SelectionParams,
) -> list[str]:
    reasons = []
    if len(pair.positives) != 1:
        reasons.append(f"{len(pair.positives)} judged positives; exactly one needed")
    q_len = length(pair.query.text, unit)
    if not query_band[0] <= q_len <= query_band[1]:
        low, high = params.query_length_percentiles
        reasons.append(
            f"query length {q_len} {unit} outside the {low:g}-{high:g} percentile band "
            f"[{query_band[0]:g}, {query_band[1]:g}]"
        )
    p_len = length(pair.positives[0].text, unit)
    inside = passage_band[0] <= p_len <= passage_band[1]
    if inside != (params.passage_band == "inside"):
        low, high = params.passage_length_percentiles
        reasons.append(
            f"passage length {p_len} {unit} {'inside' if inside else 'outside'} the {low:g}-{high:g} percentile "
            f"band [{passage_band[0]:g}, {passage_band[1]:g}]"
        )
    return reasons


def _item(writer: StageWriter, seed_id: str, pair: SeedPair, status: Literal["ok", "rejected"]) -> ItemRecord:
    passage = pair.positives[0]
    return ItemRecord(
        run_id=writer.ctx.run_id,
        item_id=seed_id,
        stage=writer.stage,
        kind="seed",
        group_id=pair.query.query_id,
        payload={
            "query_id": pair.query.query_id,
            "query": pair.query.text,
            "doc_id": passage.doc_id,
            "title": passage.title,
            "passage": passage.text,
            "positives": [p.doc_id for p in pair.positives],
        },
        status=status,
    )
