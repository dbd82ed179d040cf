"""Seed selection per subset: queries with enough relevant passages, a fixed sample of them, and the passages
the levels are re-checked on.

A query item (kind ``query``, group id ``<subset>-<seed query id>``) holds the query and its subset; each of
its relevant passages is a ``passage`` item. Where the subset asks level 2 for one of the seed's stance labels
(SciFact: SUPPORT or CONTRADICT), the query takes the stance most of its passages hold (the first of the
scheme's labels on a tie), so that level 2 narrows the relevant set as the labels say."""

from __future__ import annotations

from collections import Counter

from ifsynth.flows.recipes.ifir.settings import IFIRParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Outcome, StageWriter
from ifsynth.flows.seeds import SeedSource, open_source
from ifsynth.schemas.config import RecipeParams
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.ifir import Scheme, release_id
from ifsynth.schemas.records import ItemRecord, StageCounts
from ifsynth.schemas.seeds import SeedPair
from ifsynth.warehouse.keys import hash_sample, item_id


def subset_source(run_seeds: str, params: IFIRParams, subset: str) -> SeedSource:
    """The subset's own seeds, else the run's; ``demo`` means the built-in seeds of that subset."""
    return open_source(params.sources.get(subset) or run_seeds, demo=("ifir", subset))


def seed_sources(seeds: str, params: RecipeParams) -> list[SeedSource]:
    """One source per subset the run builds; one collection is never read as the seeds of two subsets."""
    assert isinstance(params, IFIRParams)
    shared = [subset for subset in params.chosen if not params.sources.get(subset)]
    if seeds != "demo" and len(shared) > 1:
        raise ConfigError(
            f"--seeds {seeds} would be the seeds of {', '.join(shared)}: pick its domain (--set 'domains=[...]') "
            "or give each subset its own (--set sources.<subset>=SPEC)"
        )
    return [subset_source(seeds, params, subset) for subset in params.chosen]


def select_queries(ctx: RunContext, order: int, *, stage: str) -> StageCounts:
    params = ctx.params
    assert isinstance(params, IFIRParams)
    pairs = {subset: list(subset_source(ctx.config.seeds, params, subset).pairs()) for subset in params.chosen}
    writer = StageWriter(ctx, stage, order, total=sum(map(len, pairs.values())))
    for subset, scheme in params.chosen.items():
        eligible = [pair for pair in pairs[subset] if len(pair.positives) >= params.min_relevant]
        keep = len(eligible) if ctx.config.limit is None else ctx.config.limit
        key = f"{params.seed}:{subset}:{{}}".format
        chosen = {p.query.query_id for p in hash_sample(eligible, keep, key=lambda p: key(p.query.query_id))}
        for pair in pairs[subset]:
            query_id = item_id("query", [], subset, pair.query.query_id)
            if len(pair.positives) < params.min_relevant:
                reason = f"{len(pair.positives)} relevant passages; at least {params.min_relevant} needed"
                verdict = writer.verdict(query_id, "reject", judge="rule", reason=reason)
                query = _query(writer, query_id, subset, scheme, pair)[0].model_copy(update={"status": "rejected"})
                writer.add(None, Outcome("reject", items=[query], verdicts=[verdict], n_out=0))
            elif pair.query.query_id in chosen:
                writer.add(None, Outcome("pass", items=_query(writer, query_id, subset, scheme, pair), n_out=1))
            else:
                writer.add(None, Outcome("set_aside"))
            ctx.progress.advance(stage)
    return writer.close()


def _query(writer: StageWriter, query_id: str, subset: str, scheme: Scheme, pair: SeedPair) -> list[ItemRecord]:
    labels = {str(k): str(v).upper() for k, v in (pair.query.metadata.get("labels") or {}).items()}
    group = release_id(subset, pair.query.query_id)
    query = ItemRecord(
        run_id=writer.ctx.run_id,
        item_id=query_id,
        stage=writer.stage,
        kind="query",
        group_id=group,
        payload={
            "subset": subset,
            "domain": scheme.domain,
            "query_id": group,
            "seed_query_id": pair.query.query_id,
            "query": pair.query.text,
            "relevant": [release_id(subset, p.doc_id) for p in pair.positives],
            "stance": _stance(scheme, [labels.get(p.doc_id) for p in pair.positives]),
        },
    )
    passages = [
        writer.child(
            query,
            "passage",
            {
                "doc_id": release_id(subset, p.doc_id),
                "seed_doc_id": p.doc_id,
                "title": p.title,
                "passage": p.text,
                "label": labels.get(p.doc_id),
            },
            p.doc_id,
            ord=number,
        )
        for number, p in enumerate(pair.positives, 1)
    ]
    return [query, *passages]


def _stance(scheme: Scheme, labels: list[str | None]) -> str | None:
    counts = Counter(label for label in labels if label in scheme.stance_labels)
    if not counts:
        return None
    top = max(counts.values())
    return next(label for label in scheme.stance_labels if counts[label] == top)
