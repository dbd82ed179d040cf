"""Seed selection per subset: queries with enough relevant passages, a fixed sample of them, and the passages
the levels are re-checked on.

A query item (kind ``query``, group id ``<subset>-<seed query id>``) holds the query and its subset; each of
its relevant passages is a ``passage`` item. Where the subset asks level 2 for one of the seed's stance labels
(SciFact: SUPPORT or CONTRADICT), the query takes the stance most of its passages hold (the first of the
scheme's labels on a tie), so that level 2 narrows the relevant set as the labels say."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ifsynth.flows.recipes.ifir.settings import IFIRParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.flows.seeds import SeedSource, open_source
from ifsynth.schemas.config import RecipeParams
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.ifir import SCHEMES, IFIRPassage, IFIRQuery, Scheme, release_id
from ifsynth.schemas.records import ItemRecord
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


@dataclass(frozen=True)
class Candidate:
    """A seed query of a subset, and whether the run's sample (``--limit``) drew it among the eligible ones."""

    subset: str
    pair: SeedPair
    drawn: bool


@dataclass(frozen=True, kw_only=True)
class SelectQueries(RuleStage[Candidate]):
    """Every seed query of every subset the run builds: rejected short of relevant passages, else kept when
    drawn, else set aside."""

    name: str = "select"

    def inputs(self, ctx: RunContext) -> list[list[Candidate]]:
        """One page per subset, its sample drawn here (the limit is the run's, not the recipe's)."""
        params = ctx.params
        assert isinstance(params, IFIRParams)
        pages = []
        for subset in params.chosen:
            pairs = list(subset_source(ctx.config.seeds, params, subset).pairs())
            eligible = [pair for pair in pairs if len(pair.positives) >= params.min_relevant]
            keep = len(eligible) if ctx.config.limit is None else ctx.config.limit
            key = f"{params.seed}:{subset}:{{}}".format
            chosen = {p.query.query_id for p in hash_sample(eligible, keep, key=lambda p: key(p.query.query_id))}
            pages.append([Candidate(subset, pair, pair.query.query_id in chosen) for pair in pairs])
        return pages

    def decide(self, env: Env, page: list[Candidate]) -> Iterable[Decided]:
        params = env.params
        assert isinstance(params, IFIRParams)
        for candidate in page:
            pair, scheme = candidate.pair, SCHEMES[candidate.subset]
            query_id = item_id("query", [], candidate.subset, pair.query.query_id)
            if len(pair.positives) < params.min_relevant:
                reason = f"{len(pair.positives)} relevant passages; at least {params.min_relevant} needed"
                verdict = env.verdict(
                    query_id,
                    "reject",
                    judge="rule",
                    reason=reason,
                    score=len(pair.positives),
                    threshold=params.min_relevant,
                    rule="relevant passages",
                )
                query = _query(env, query_id, candidate.subset, scheme, pair)[0].model_copy(
                    update={"status": "rejected"}
                )
                yield None, Outcome("reject", items=[query], verdicts=[verdict], n_out=0)
            elif candidate.drawn:
                yield None, Outcome("pass", items=_query(env, query_id, candidate.subset, scheme, pair), n_out=1)
            else:
                yield None, Outcome("set_aside")


def _query(env: Env, query_id: str, subset: str, scheme: Scheme, pair: SeedPair) -> list[ItemRecord]:
    labels = {str(k): str(v).upper() for k, v in (pair.query.metadata.get("labels") or {}).items()}
    group = release_id(subset, pair.query.query_id)
    payload = IFIRQuery(
        subset=subset,
        domain=scheme.domain,
        query_id=group,
        seed_query_id=pair.query.query_id,
        query=pair.query.text,
        relevant=[release_id(subset, p.doc_id) for p in pair.positives],
        stance=_stance(scheme, [labels.get(p.doc_id) for p in pair.positives]),
    )
    query = ItemRecord(
        run_id=env.run_id,
        item_id=query_id,
        stage=env.stage,
        kind="query",
        group_id=group,
        payload=payload.model_dump(mode="json"),
    )
    passages = [
        env.child(
            query,
            "passage",
            IFIRPassage(
                doc_id=release_id(subset, p.doc_id),
                seed_doc_id=p.doc_id,
                title=p.title,
                passage=p.text,
                label=labels.get(p.doc_id),
            ),
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
