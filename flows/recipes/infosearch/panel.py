"""The retrieval panel (InfoSearch's step 7): a positive that most rankers fail to place in their top 50 for its
own core query is likely mislabelled (a seed pair that does not match, a rewrite that drifted), and goes.

The paper ran twelve retrievers and reviewed by hand every document outside the top 50 of six or more. Here
the panel is BM25 over the dimension's documents (positives and query negatives) plus any TREC run files the
user passes (``panel_runs``, query ids ``<dimension>-<query id>``, optionally with ``_<n>`` or ``-og``, and
the release's document ids ``..._doc<n>`` and ``..._neg<j>``). A document is flagged when at least
``panel_miss_share`` of the rankers that can judge it miss it; BM25 abstains on documents written in another
script than its query (it cannot match Chinese to English). A flagged document is rejected with a
``rule:panel`` verdict (``ifsynth audit --stage panel`` lists it) when at least ``panel_min_rankers`` rankers
judged it; with fewer the flag is recorded and the document kept. BM25 alone must not decide: it misses true
positives that share no word with their query, and dropping them would tilt the benchmark towards BM25.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar

from ifsynth.flows.evaluation.metrics import ranking
from ifsynth.flows.evaluation.retrieval import Run, bm25, read_run
from ifsynth.flows.recipes.infosearch.settings import InfoSearchParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.errors import ConfigError
from ifsynth.schemas.infosearch import ConditionedDocument, CoreQuery, CoreText, Document, QueryNegative
from ifsynth.schemas.records import ItemRecord, Payload

JUDGE = "rule:panel"
_RUN_QUERY = re.compile(r"^(?P<core>.+?)(?:_\d+)?(?:-og)?$")


@dataclass(frozen=True)
class Ranker:
    """One member of the panel: its name, its run, and whether it can judge documents in a non-Latin script."""

    name: str
    run: Run
    any_script: bool


def release_doc_id(item: ItemRecord) -> str:
    """The id the document will have in the release (see assemble.py)."""
    if item.kind == "negative":
        return f"{item.group_id}_neg{item.read(QueryNegative).number}"
    return f"{item.group_id}_doc{item.read(Document).position}"


@dataclass(frozen=True)
class Review:
    """A positive with the panel that can judge it: its rankings for the positive's core query."""

    document: ItemRecord
    panel: list[Ranker]


@dataclass(frozen=True, kw_only=True)
class ReviewDocuments(RuleStage[Review]):
    """Every positive of ``source``, reviewed by the panel ranking its dimension's documents; one page per
    dimension."""

    reads: ClassVar[type[Payload]] = CoreText
    name: str = "panel"
    source: str = "rules"
    whole: bool = True

    def total(self, ctx: RunContext) -> int:
        return sum(item.kind == "document" for page in ctx.warehouse.items(ctx.run_id, self.source) for item in page)

    def inputs(self, ctx: RunContext) -> Iterator[list[Review]]:
        """The rankings: BM25 over each dimension's documents (positives and query negatives), and the user's
        run files; BM25 leaves out the positives written in another script than their query."""
        params = ctx.params
        assert isinstance(params, InfoSearchParams)
        by_dimension: dict[str, list[ItemRecord]] = {}
        for page in ctx.warehouse.items(ctx.run_id, self.source):
            for item in page:
                by_dimension.setdefault(item.read(CoreText).dimension, []).append(item)
        cores = {
            item.group_id: item.read(CoreQuery).query
            for page in ctx.warehouse.items(ctx.run_id, "collect")
            for item in page
            if item.kind == "query"
        }
        files = {path: _core_run(read_run(path), path, cores) for path in params.panel_runs}
        for dimension, items in by_dimension.items():
            queries = {group: cores[group] for group in {item.group_id for item in items}}
            docs = [(release_doc_id(item), item.read(CoreText).passage) for item in items]
            panel = [Ranker("bm25", bm25(docs, queries, depth=params.panel_depth), any_script=False)]
            panel += [Ranker(path, run, any_script=True) for path, run in files.items()]
            scripts = params.dimension_specs[dimension].scripts
            reviews = []
            for item in items:
                if item.kind != "document":
                    continue
                foreign = scripts.get(item.read(ConditionedDocument).condition, "latin") != "latin"
                reviews.append(Review(item, judging(panel, foreign=foreign)))
            yield reviews

    def decide(self, env: Env, page: list[Review]) -> Iterable[Decided]:
        params = env.params
        assert isinstance(params, InfoSearchParams)
        return [(entry.document.item_id, review(env, entry, params)) for entry in page]


def judging(panel: list[Ranker], *, foreign: bool) -> list[Ranker]:
    """The rankers that can judge a positive: all, or, for one written in another script than its query, those
    that read any script (not BM25)."""
    return [ranker for ranker in panel if ranker.any_script or not foreign]


def review(env: Env, entry: Review, params: InfoSearchParams) -> Outcome:
    """Flagged when at least ``panel_miss_share`` of its panel miss it; rejected only by a panel of at least
    ``panel_min_rankers``, else kept with the flag on record."""
    item, panel = entry.document, entry.panel
    doc_id, depth = release_doc_id(item), params.panel_depth
    ranks = {r.name: _rank(r.run.get(item.group_id, {}), doc_id) for r in panel}
    missed = [name for name, rank in ranks.items() if rank is None or rank > depth]
    needed = math.ceil(params.panel_miss_share * len(panel)) if panel else 0
    shown = ", ".join(f"{name} {rank or f'>{depth}'}" for name, rank in ranks.items()) or "no ranker can judge it"
    flagged = bool(panel) and len(missed) >= needed
    summary = f"{len(missed)} of {len(panel)} rankers place it outside their top {depth} for its query ({shown})"
    if flagged and len(panel) >= params.panel_min_rankers:
        verdict = env.verdict(
            item.item_id,
            "reject",
            judge=JUDGE,
            reason=f"panel: {summary}",
            score=len(missed),
            threshold=needed,
            rule="panel",
        )
        return Outcome("reject", verdicts=[verdict], n_out=0)
    reason = (
        f"panel: flagged, kept: {summary}; rejecting takes {params.panel_min_rankers} rankers (add panel_runs)"
        if flagged
        else f"panel: {summary}"
    )
    verdict = env.verdict(
        item.item_id, "pass", judge=JUDGE, reason=reason, score=len(missed), threshold=needed, rule="panel"
    )
    return Outcome("pass", verdicts=[verdict], n_out=1)


def _rank(scores: Mapping[str, float], doc_id: str) -> int | None:
    order = ranking(dict(scores))
    return order.index(doc_id) + 1 if doc_id in scores else None


def _core_run(run: Run, path: str, cores: Mapping[str, str]) -> Run:
    """A user's run keyed by core query: ``<core>``, ``<core>_<n>`` and ``<core>_<n>-og`` all rank that query."""
    keyed: Run = {}
    for qid, scores in run.items():
        match = _RUN_QUERY.match(qid)
        core = qid if qid in cores else match.group("core") if match else qid
        if core in cores:
            keyed.setdefault(core, scores)
    if run and not keyed:
        example = next(iter(cores), "<dimension>-<query id>")
        raise ConfigError(f"panel run `{path}` names none of this run's core queries (ids like `{example}`)")
    return keyed
