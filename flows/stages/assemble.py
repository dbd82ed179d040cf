"""Assembly: surviving items become release rows, untouched seed passages become noise, all frozen as a
release with its card. InstructIR's ids follow its release: ``<qid>_<k>`` and ``<pid>_<k>``, k counted from 1
within each query after filtering. InF-IR's tuples follow the agreed three-mode layout (``infir_tuple``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ifsynth.flows.llm.route import endpoint_summaries
from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.registry import recipe
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.config import NoisePool
from ifsynth.schemas.infir import MODES, TupleItem
from ifsynth.schemas.modes import INSTRUCTED
from ifsynth.schemas.payloads import RewriteItem
from ifsynth.schemas.records import ItemRecord, Payload, StageCounts
from ifsynth.schemas.seeds import SeedPassage
from ifsynth.warehouse.keys import hash_sample
from ifsynth.warehouse.store import ReleaseWriter


@dataclass
class Rows:
    """What a release is made of; ``used`` are seed passages that must not come back as noise."""

    docs: list[dict[str, Any]] = field(default_factory=list)
    queries: list[dict[str, Any]] = field(default_factory=list)
    qrels: list[dict[str, Any]] = field(default_factory=list)
    used: set[str] = field(default_factory=set)


def instructir_instance(rows: Rows, item: ItemRecord, number: int) -> None:
    """One instance: the instructed query ``<qid>_<k>`` and its rewritten positive ``<pid>_<k>``."""
    rewrite = item.read(RewriteItem)
    query_id, doc_id = f"{rewrite.query_id}_{number}", f"{rewrite.doc_id}_{number}"
    rows.used.add(rewrite.doc_id)
    provenance = {
        "item": item.item_id,
        "origin_query_id": rewrite.query_id,
        "origin_doc_id": rewrite.doc_id,
    }
    rows.docs.append(
        {
            "doc_id": doc_id,
            "title": rewrite.title,
            "text": rewrite.passage,
            "meta": json.dumps(provenance, sort_keys=True),
        }
    )
    rows.queries.append(
        {
            "mode": INSTRUCTED,
            "query_id": query_id,
            "group_id": rewrite.query_id,
            "query": rewrite.query,
            "instruction": rewrite.instruction,
            "meta": json.dumps(provenance, sort_keys=True),
        }
    )
    rows.qrels.append({"mode": INSTRUCTED, "query_id": query_id, "doc_id": doc_id, "score": 1})


INFIR_DOC_SUFFIX = {"document_positive": "pos", "hard_negative_document_1": "neg1", "hard_negative_document_2": "neg2"}


def infir_tuple(rows: Rows, item: ItemRecord, _number: int) -> None:
    """One tuple: three queries sharing the tuple id (one per mode) and its three passages, each relevant in
    exactly one mode."""
    made = item.read(TupleItem)
    tuple_id = made.query_id
    rows.used.add(made.doc_id)
    doc_ids = {name: f"{tuple_id}_{suffix}" for name, suffix in INFIR_DOC_SUFFIX.items()}
    for mode, (_, _, passage) in MODES.items():
        origin = {"origin_doc_id": made.doc_id} if mode == "positive" else {"item": made.items[passage]}
        meta: dict[str, Any] = {"role": mode, "tuple": tuple_id, **origin}
        rows.docs.append(
            {
                "doc_id": doc_ids[passage],
                "title": "",
                "text": made.text(passage),
                "meta": json.dumps(meta, sort_keys=True),
            }
        )
    for mode, (query, instruction, passage) in MODES.items():
        meta = {
            "tuple_item": item.item_id,
            "origin_query_id": made.query_id,
            "origin_doc_id": made.doc_id,
            "items": made.items,
            **({"language": made.language} if made.language is not None else {}),
        }
        rows.queries.append(
            {
                "mode": mode,
                "query_id": tuple_id,
                "group_id": tuple_id,
                "query": made.text(query),
                "instruction": made.text(instruction),
                "meta": json.dumps(meta, sort_keys=True),
            }
        )
        rows.qrels += [
            {"mode": mode, "query_id": tuple_id, "doc_id": doc_id, "score": int(name == passage)}
            for name, doc_id in doc_ids.items()
        ]


Add = Callable[[Rows, ItemRecord, int], None]  # one item's release rows, given its number in its group


def add_page(rows: Rows, page: list[ItemRecord], add: Add) -> None:
    """A page's items (whole groups) as release rows, each numbered from 1 within its group."""
    numbers: dict[str, int] = {}
    for item in page:
        number = numbers[item.group_id] = numbers.get(item.group_id, 0) + 1
        add(rows, item, number)


def write_pages(release: ReleaseWriter, pages: Iterable[list[ItemRecord]], add: Add, used: set[str]) -> tuple[int, int]:
    """Each page's release rows, written as they are made (``used`` gathers their seed passages); the instances
    and corpus rows written. On its own so that the last page is let go before the noise is read."""
    instances = corpus = 0
    for page in pages:
        rows = Rows(used=used)
        add_page(rows, page, add)
        release.add(docs=rows.docs, queries=rows.queries, qrels=rows.qrels)
        instances, corpus = instances + len(rows.queries), corpus + len(rows.docs)
    return instances, corpus


def add_noise(rows: Rows, candidates: Iterable[SeedPassage], max_noise: int | None, seed: int) -> int:
    """At most ``max_noise`` (none: all) of the candidate passages no row used, drawn by hash of (seed, doc id)
    and added to the corpus in id order; how many."""
    unused = (p for p in candidates if p.doc_id not in rows.used)
    key = f"{seed}:{{}}".format
    noise = list(unused) if max_noise is None else hash_sample(unused, max_noise, key=lambda p: key(p.doc_id))
    for passage in sorted(noise, key=lambda p: p.doc_id):
        rows.docs.append(
            {
                "doc_id": passage.doc_id,
                "title": passage.title,
                "text": passage.text,
                "meta": json.dumps({"noise": True}),
            }
        )
    return len(noise)


@dataclass(frozen=True, kw_only=True)
class AssembleRelease(RuleStage[ItemRecord]):
    """InstructIR's assembly: every ``ok`` item of ``source`` is accepted and becomes release rows; at most
    ``max_noise`` (none: all) untouched passages of ``noise_pool`` join the corpus."""

    reads: ClassVar[type[Payload]] = RewriteItem
    name: str = "assemble"
    source: str = "rewrite"
    whole: bool = True
    max_noise: int | None
    noise_pool: NoisePool = "positives"

    def add(self, rows: Rows, item: ItemRecord, number: int) -> None:
        instructir_instance(rows, item, number)

    def decide(self, env: Env, page: list[ItemRecord]) -> Iterable[Decided]:
        return [(item.item_id, Outcome("pass", n_out=1)) for item in page]

    def finish(self, ctx: RunContext, env: Env, counts: StageCounts) -> None:
        """The release of the items the stage passed (read again once their statuses are written, so an item
        a person rejected here stays out), written a page at a time: its rows are many."""
        used: set[str] = set()
        with releasing(ctx) as release:
            instances, corpus = write_pages(release, self.inputs(ctx), self.add, used)
            groups = release.query_groups()  # counted in the file: a long run's ids are not held to the end
            noise = 0
            if self.max_noise != 0:
                rows = Rows(used=used)
                noise = add_noise(rows, _noise_candidates(ctx, self.noise_pool), self.max_noise, ctx.params.seed)
                release.add(docs=rows.docs)
            counted = {"instances": instances, "queries": groups, "corpus": corpus + noise, "noise": noise}
            release.finish(release_card(ctx, counts, **counted))
        # every item the pages read, by the same condition: outside the release's transaction
        ctx.warehouse.set_stage_status(ctx.run_id, self.source, "accepted")


@dataclass(frozen=True, kw_only=True)
class AssembleTuples(AssembleRelease):
    """InF-IR's assembly: each tuple becomes the agreed three-mode rows (``infir_tuple``); no noise."""

    reads: ClassVar[type[Payload]] = TupleItem
    source: str = "tuples"
    max_noise: int | None = 0

    def add(self, rows: Rows, item: ItemRecord, number: int) -> None:
        infir_tuple(rows, item, number)


def _noise_candidates(ctx: RunContext, pool: NoisePool) -> Iterator[SeedPassage]:
    """InstructIR's release kept every judged positive of the seed collection (7,433 MS MARCO dev passages) and
    swapped in the rewrites: its noise is the positives of the queries it did not use."""
    return ctx.source.passages() if pool == "corpus" else ctx.source.positives()


def releasing(ctx: RunContext) -> AbstractContextManager[ReleaseWriter]:
    """The run's release, named as the run, replacing what an earlier attempt of this run wrote."""
    name = ctx.warehouse.run(ctx.run_id).name
    return ctx.warehouse.writing_release(name=name, run_id=ctx.run_id, recipe=ctx.recipe, source=ctx.config.seeds)


def publish(
    ctx: RunContext,
    card: dict[str, Any],
    docs: list[dict[str, Any]],
    queries: list[dict[str, Any]],
    qrels: list[dict[str, Any]],
    top_ranked: list[dict[str, Any]] | None = None,
) -> None:
    """The run's release, of rows made all at once."""
    with releasing(ctx) as release:
        release.add(docs=docs, queries=queries, qrels=qrels, top_ranked=top_ranked or [])
        release.finish(card)


def release_card(ctx: RunContext, assemble: StageCounts, **counts: int) -> dict[str, Any]:
    """What a reader of the release needs to know; nothing that differs between identical runs."""
    config = ctx.config
    stages = ctx.warehouse.stage_rows(ctx.run_id)
    stages = [row for row in stages if row["stage"] != assemble.stage]
    stages.append(assemble.model_dump(include={"stage", "n_in", "n_out", "rejected", "parse_error", "failed"}))
    return {
        "recipe": ctx.recipe,
        "seeds": config.seeds,
        "limit": config.limit,
        "models": {"generator": config.model_for("generator"), "judge": config.model_for("judge")},
        "endpoints": endpoint_summaries(config),
        "params": ctx.params.model_dump(mode="json"),
        "fidelity": {
            "paper": recipe(ctx.recipe).paper,
            "differs": recipe(ctx.recipe).fidelity(ctx.params),
            "templates": {name: ctx.prompts.hash(name) for name in map(ctx.template, recipe(ctx.recipe).templates)},
        },
        "counts": counts,
        "stages": stages,
        **({"reviewed": _reviewed(ctx)} if ctx.humans else {}),
    }


def _reviewed(ctx: RunContext) -> dict[str, Any]:
    """How far people changed the release: their verdicts, and the decisions of a stage they overruled."""
    return {"from_run": ctx.config.humans_from or ctx.run_id, "human_verdicts": len(ctx.humans),
            "overruled": len(ctx.overruled)}  # fmt: skip
