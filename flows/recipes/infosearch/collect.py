"""InfoSearch data collection: per dimension, core queries with the seed documents their conditions need.

A core query is one item (kind ``query``, group id ``<dimension>-<query id>``); each seed document it keeps
is another (kind ``document``) carrying its condition, or none yet for the keyword dimension, whose
conditions are extracted later. The sample per dimension is the ``limit`` eligible queries with the
smallest hash of (seed, dimension, query id), stable under any file order.
"""

from __future__ import annotations

from typing import Literal

from ifsynth.flows.recipes.infosearch.settings import Dimension, InfoSearchParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.flows.seeds import SeedSource, open_source
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.schemas.seeds import SeedPair, SeedPassage
from ifsynth.warehouse.keys import hash_sample, item_id


def dimension_source(run_seeds: str, spec: Dimension, dimension: str) -> SeedSource:
    """The dimension's own seeds, else the run's; ``demo`` means the built-in seeds of that dimension."""
    return open_source(spec.seeds or run_seeds, demo=("infosearch", dimension))


def needed(spec: Dimension, params: InfoSearchParams) -> int:
    """Positives a query must have: one per collected condition, one for a rewrite, a few for keywords."""
    if not spec.conditions:
        return params.keyword_documents[0]
    return 1 if spec.seed_condition is not None else len(spec.conditions)


def seed_documents(
    pair: SeedPair, spec: Dimension, params: InfoSearchParams
) -> list[tuple[int, str | None, SeedPassage]]:
    """(position, condition, passage) of the seed documents this query keeps; positions count from 1."""
    if not spec.conditions:
        return [(n, None, p) for n, p in enumerate(pair.positives[: params.keyword_documents[1]], 1)]
    if spec.seed_condition is not None:
        position = spec.conditions.index(spec.seed_condition) + 1
        # seeds holding one positive per condition give the seed condition's own (translation reads them so)
        own = pair.positives[position - 1] if len(pair.positives) == len(spec.conditions) else pair.positives[0]
        return [(position, spec.seed_condition, own)]
    return [(n, condition, p) for n, (condition, p) in enumerate(zip(spec.conditions, pair.positives, strict=False), 1)]


def collect_seeds(ctx: RunContext, order: int, *, stage: str) -> StageCounts:
    params = ctx.params
    assert isinstance(params, InfoSearchParams)
    sources = {
        name: dimension_source(ctx.config.seeds, params.dimension_specs[name], name) for name in params.dimensions
    }
    pairs = {name: list(source.pairs()) for name, source in sources.items()}  # like select: hundreds, not millions
    writer = StageWriter(ctx, stage, order, total=sum(map(len, pairs.values())))
    for dimension, seeds in pairs.items():
        spec = params.dimension_specs[dimension]
        minimum = needed(spec, params)
        eligible: list[SeedPair] = []
        for pair in seeds:
            core_id = item_id("core", [], dimension, pair.query.query_id)
            have = len(pair.positives)
            if have < minimum:
                reason = f"seed_positives: {have} judged positives, {dimension} needs at least {minimum}"
                verdict = writer.verdict(core_id, "reject", judge="rule", reason=reason, score=have, threshold=minimum)
                rejected = _core(writer, core_id, dimension, pair, spec, params, status="rejected")
                writer.add(core_id, Outcome("reject", items=[rejected], verdicts=[verdict], n_out=0))
                ctx.progress.advance(stage)
            else:
                eligible.append(pair)
        keep = len(eligible) if ctx.config.limit is None else ctx.config.limit
        salt = f"{params.seed}:{dimension}"
        drawn = hash_sample(eligible, keep, key=lambda pair: f"{salt}:{pair.query.query_id}")
        chosen = {pair.query.query_id for pair in drawn}
        for pair in eligible:
            core_id = item_id("core", [], dimension, pair.query.query_id)
            items = []
            if pair.query.query_id in chosen:
                core = _core(writer, core_id, dimension, pair, spec, params, status="ok")
                items = [core, *_documents(writer, core, pair, spec, params)]
            writer.add(core_id, Outcome("pass", items=items, n_out=len(items)))
            ctx.progress.advance(stage)
    return writer.close()


def _core(
    writer: StageWriter,
    core_id: str,
    dimension: str,
    pair: SeedPair,
    spec: Dimension,
    params: InfoSearchParams,
    *,
    status: Literal["ok", "rejected"],
) -> ItemRecord:
    kept = seed_documents(pair, spec, params)
    conditions = list(spec.conditions) if spec.conditions else [None] * len(kept)
    return ItemRecord(
        run_id=writer.ctx.run_id,
        item_id=core_id,
        stage=writer.stage,
        kind="query",
        group_id=f"{dimension}-{pair.query.query_id}",
        payload={
            "dimension": dimension,
            "query_id": pair.query.query_id,
            "query": pair.query.text,
            "conditions": conditions,
            "passages": [{"doc_id": p.doc_id, "title": p.title, "text": p.text} for _, _, p in kept],
        },
        status=status,
    )


def _documents(
    writer: StageWriter, core: ItemRecord, pair: SeedPair, spec: Dimension, params: InfoSearchParams
) -> list[ItemRecord]:
    payload = core.payload
    return [
        writer.child(
            core,
            "document",
            {
                "dimension": payload["dimension"],
                "query_id": payload["query_id"],
                "query": payload["query"],
                "position": position,
                "condition": condition,
                "origin": "seed",
                "doc_id": passage.doc_id,
                "title": passage.title,
                "passage": passage.text,
            },
            position,
            passage.doc_id,
            id_as="seeddoc",
            ord=position,
        )
        for position, condition, passage in seed_documents(pair, spec, params)
    ]
