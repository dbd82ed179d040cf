"""InfoSearch data collection: per dimension, core queries with the seed documents their conditions need.

A core query is one item (kind ``query``, group id ``<dimension>-<query id>``); each seed document it keeps
is another (kind ``document``) carrying its condition, or none yet for the keyword dimension, whose
conditions are extracted later. The sample per dimension is the ``limit`` eligible queries with the
smallest hash of (seed, dimension, query id), stable under any file order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from ifsynth.flows.recipes.infosearch.settings import Dimension, InfoSearchParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.flows.seeds import SeedSource, open_source
from ifsynth.schemas.infosearch import CoreQuery, SeedText
from ifsynth.schemas.records import ItemRecord
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


@dataclass(frozen=True)
class DimensionSeeds:
    """One dimension's seed pairs, a page of their own: its draw reads every eligible seed at once."""

    dimension: str
    pairs: list[SeedPair]
    limit: int | None  # the run's --limit, drawn per dimension


@dataclass(frozen=True, kw_only=True)
class CollectSeeds(RuleStage[DimensionSeeds]):
    """Every seed pair of every dimension: short of positives, rejected with the count; else it passes, and
    passes on its core query and documents when the draw takes it."""

    name: str = "collect"

    def inputs(self, ctx: RunContext) -> Iterator[list[DimensionSeeds]]:
        params = ctx.params
        assert isinstance(params, InfoSearchParams)
        for name in params.dimensions:
            source = dimension_source(ctx.config.seeds, params.dimension_specs[name], name)
            # like select: hundreds of seeds, not millions
            yield [DimensionSeeds(name, list(source.pairs()), ctx.config.limit)]

    def total(self, ctx: RunContext) -> int:
        """Every pair, read here first, so a seed source that cannot be read stops the stage before it starts."""
        return sum(len(seeds.pairs) for page in self.inputs(ctx) for seeds in page)

    def decide(self, env: Env, page: list[DimensionSeeds]) -> Iterable[Decided]:
        params = env.params
        assert isinstance(params, InfoSearchParams)
        for seeds in page:
            yield from _collect(env, params, seeds)


def _collect(env: Env, params: InfoSearchParams, seeds: DimensionSeeds) -> Iterator[Decided]:
    dimension = seeds.dimension
    spec = params.dimension_specs[dimension]
    minimum = needed(spec, params)
    eligible: list[SeedPair] = []
    for pair in seeds.pairs:
        core_id = item_id("core", [], dimension, pair.query.query_id)
        have = len(pair.positives)
        if have < minimum:
            reason = f"seed_positives: {have} judged positives, {dimension} needs at least {minimum}"
            verdict = env.verdict(
                core_id, "reject", judge="rule", reason=reason, score=have, threshold=minimum, rule="seed_positives"
            )
            rejected = _core(env, core_id, dimension, pair, spec, params, status="rejected")
            yield core_id, Outcome("reject", items=[rejected], verdicts=[verdict], n_out=0)
        else:
            eligible.append(pair)
    keep = len(eligible) if seeds.limit is None else seeds.limit
    salt = f"{params.seed}:{dimension}"
    drawn = hash_sample(eligible, keep, key=lambda pair: f"{salt}:{pair.query.query_id}")
    chosen = {pair.query.query_id for pair in drawn}
    for pair in eligible:
        core_id = item_id("core", [], dimension, pair.query.query_id)
        items = []
        if pair.query.query_id in chosen:
            core = _core(env, core_id, dimension, pair, spec, params, status="ok")
            items = [core, *_documents(env, core, pair, spec, params)]
        yield core_id, Outcome("pass", items=items, n_out=len(items))


def _core(
    env: Env,
    core_id: str,
    dimension: str,
    pair: SeedPair,
    spec: Dimension,
    params: InfoSearchParams,
    *,
    status: Literal["ok", "rejected"],
) -> ItemRecord:
    kept = seed_documents(pair, spec, params)
    conditions: list[str | None] = list(spec.conditions) if spec.conditions else [None] * len(kept)
    payload = CoreQuery(
        dimension=dimension,
        query_id=pair.query.query_id,
        query=pair.query.text,
        conditions=conditions,
        passages=[SeedText(doc_id=p.doc_id, title=p.title, text=p.text) for _, _, p in kept],
    )
    return ItemRecord(
        run_id=env.run_id,
        item_id=core_id,
        stage=env.stage,
        kind="query",
        group_id=f"{dimension}-{pair.query.query_id}",
        payload=payload.model_dump(mode="json"),
        status=status,
    )


def _documents(
    env: Env, core: ItemRecord, pair: SeedPair, spec: Dimension, params: InfoSearchParams
) -> list[ItemRecord]:
    query = core.read(CoreQuery)
    return [
        env.child(
            core,
            "document",
            {
                "dimension": query.dimension,
                "query_id": query.query_id,
                "query": query.query,
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
