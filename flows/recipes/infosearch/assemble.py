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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from ifsynth.flows.recipes.infosearch.settings import InfoSearchParams
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.flows.stages.assemble import Rows, publish, release_card
from ifsynth.schemas.infosearch import CoreQuery, QueryNegative, ReversedInstruction
from ifsynth.schemas.modes import CHANGED, INFOSEARCH_MODES, OG, REVERSED
from ifsynth.schemas.records import ItemRecord, Payload, StageCounts

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


@dataclass(frozen=True)
class Core:
    """A core query with its finished positives (any number per condition) and its query negatives."""

    query: ItemRecord
    finished: list[ItemRecord]
    negatives: list[ItemRecord]


@dataclass(frozen=True, kw_only=True)
class AssembleInfoSearch(RuleStage[Core]):
    """Every complete core query (read from ``collect``, its positives from ``reversals``, its negatives from
    ``negatives``) becomes release rows; the others are rejected with what they lacked."""

    reads: ClassVar[type[Payload]] = ReversedInstruction
    name: str = "assemble"
    reversals: str = "reversal"
    negatives: str = "rules"
    whole: bool = True

    def total(self, ctx: RunContext) -> int:
        return len(_grouped(ctx, "collect", "query"))

    def inputs(self, ctx: RunContext) -> Iterator[list[Core]]:
        """One page, in group order: hundreds of core queries, not millions."""
        cores = _grouped(ctx, "collect", "query")
        finished, made = _grouped(ctx, self.reversals), _grouped(ctx, self.negatives, "negative")
        yield [
            Core(query, finished.get(group_id, []), made.get(group_id, []))
            for group_id, (query,) in sorted(cores.items())
        ]

    def decide(self, env: Env, page: list[Core]) -> Iterable[Decided]:
        for core in page:
            positives = complete_positives(core)
            if complete(core, positives):
                yield core.query.item_id, Outcome("pass", n_out=len(positives))
            else:
                yield core.query.item_id, incomplete(env, core, positives)

    def finish(self, ctx: RunContext, env: Env, counts: StageCounts) -> None:
        """The release of the complete core queries, their positives marked ``accepted``."""
        rows = Rows()
        tallies: dict[str, dict[str, int]] = {}
        accepted: list[str] = []
        for page in self.inputs(ctx):
            for core in page:
                positives = complete_positives(core)
                if not complete(core, positives):
                    continue
                dimension = core.query.read(CoreQuery).dimension
                release_rows(rows, core.query.group_id, dimension, list(positives.values()), core.negatives)
                accepted += [item.item_id for item in positives.values()]
                tally = tallies.setdefault(dimension, {"core": 0, "instructed": 0, "negatives": 0})
                tally["core"] += 1
                tally["instructed"] += len(positives)
                tally["negatives"] += len(core.negatives)
        ctx.warehouse.set_status(ctx.run_id, accepted, "accepted")
        publish(ctx, card(ctx, counts, tallies, corpus=len(rows.docs)), rows.docs, rows.queries, rows.qrels)


def complete_positives(core: Core) -> dict[int, ItemRecord]:
    """The finished document of each of the core query's condition positions that has one (the first, if
    several), in position order."""
    by_position: dict[int, ItemRecord] = {}
    for item in core.finished:
        by_position.setdefault(item.read(ReversedInstruction).position, item)
    required = len(core.query.read(CoreQuery).conditions)
    return {n: by_position[n] for n in range(1, required + 1) if n in by_position}


def complete(core: Core, positives: dict[int, ItemRecord]) -> bool:
    """A document for every condition and at least one query negative: the core query enters the release."""
    return len(positives) == len(core.query.read(CoreQuery).conditions) and bool(core.negatives)


def incomplete(env: Env, core: Core, positives: dict[int, ItemRecord]) -> Outcome:
    """The rejection of a core query short of a condition's document or of any query negative."""
    required = len(core.query.read(CoreQuery).conditions)
    missing = [n for n in range(1, required + 1) if n not in positives]
    reason = (
        f"complete_core_query: {len(positives)} of {required} conditions complete"
        + (f" (missing positions {missing})" if missing else "")
        + f"; {len(core.negatives)} query negatives, at least 1 needed"
    )
    verdict = env.verdict(
        core.query.item_id,
        "reject",
        judge="rule",
        reason=reason,
        score=len(positives),
        threshold=required,
        rule="complete_core_query",
    )
    return Outcome("reject", verdicts=[verdict], n_out=0)


def card(ctx: RunContext, counts: StageCounts, tallies: dict[str, dict[str, int]], *, corpus: int) -> dict[str, Any]:
    """The release card with InfoSearch's counts per dimension and what its qrels mean."""
    params = ctx.params
    assert isinstance(params, InfoSearchParams)
    total = {key: sum(t[key] for t in tallies.values()) for key in ("core", "instructed", "negatives")}
    released = release_card(
        ctx,
        counts,
        core_queries=total["core"],
        instructed_queries=total["instructed"],
        reversed_queries=total["instructed"],
        corpus=corpus,
        query_negatives=total["negatives"],
    )
    released["dimensions"] = {
        name: {**tally, "public_name": params.dimension_specs[name].public_name}
        for name, tally in sorted(tallies.items())
    }
    released["notes"] = [
        "| dimension | public task | core queries | instructed queries | query negatives |",
        "|---|---|---:|---:|---:|",
        *(
            f"| {name} | {t['public_name']}-v1 | {t['core']} | {t['instructed']} | {t['negatives']} |"
            for name, t in released["dimensions"].items()
        ),
        "",
        *QRELS_NOTE,
    ]
    return released


def release_rows(
    rows: Rows, core: str, dimension: str, positives: list[ItemRecord], negatives: list[ItemRecord]
) -> None:
    """A complete core query's documents, its three queries per condition and their qrels."""

    def meta(**fields: Any) -> str:
        return json.dumps({"dimension": dimension, **fields}, sort_keys=True, ensure_ascii=False)

    finished = [(item.item_id, item.read(ReversedInstruction)) for item in positives]
    for item_id, p in finished:
        rows.docs.append(
            {
                "doc_id": f"{core}_doc{p.position}",
                "title": p.title if p.origin == "seed" else "",
                "text": p.passage,
                "meta": meta(
                    condition=p.condition,
                    role="positive",
                    origin=p.origin,
                    origin_doc_id=p.doc_id,
                    item=item_id,
                ),
            }
        )
    for item in negatives:
        negative = item.read(QueryNegative)
        rows.docs.append(
            {
                "doc_id": f"{core}_neg{negative.number}",
                "title": "",
                "text": negative.passage,
                "meta": meta(condition=None, role="query_negative", item=item.item_id),
            }
        )
    for item_id, p in finished:
        query_id, own = f"{core}_{p.position}", p.position
        instructions = {OG: "", CHANGED: p.instruction, REVERSED: p.reversed_instruction}
        for mode in INFOSEARCH_MODES:
            rows.queries.append(
                {
                    "mode": mode,
                    "query_id": query_id,
                    "group_id": core,
                    "query": p.query,
                    "instruction": instructions[mode],
                    "meta": meta(condition=p.condition, item=item_id),
                }
            )
            for _, other in finished:
                score = {OG: 1, CHANGED: int(other.position == own), REVERSED: int(other.position != own)}[mode]
                rows.qrels.append(
                    {"mode": mode, "query_id": query_id, "doc_id": f"{core}_doc{other.position}", "score": score}
                )
