"""Seed selection: length bands computed from the seed data itself, exactly one positive, a fixed sample.

Queries are kept inside their band. Passages are kept inside or outside theirs: InstructIR's paper says inside,
its released seeds (1,743 passages, none of length 255-371 characters) were kept outside.

Three passes over the source (lengths, decisions, the eligible pairs' pages) keep memory flat on large
collections: between passes only the bands and the eligible query ids are held (with the passages more than
one of them has, one query per passage). The sample is the ``limit`` eligible queries with the smallest hash
of (seed, query id): stable under any file order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Literal, Self

import numpy as np

from ifsynth.flows.run.context import RunContext
from ifsynth.flows.run.stage import Decided, Env, Outcome, RuleStage
from ifsynth.schemas.config import RecipeParams, SeedSelection
from ifsynth.schemas.records import ItemRecord
from ifsynth.schemas.seeds import SeedPair
from ifsynth.warehouse.keys import hash_sample, item_id

PAGE = 1000
Band = tuple[float, float]


def selection(params: RecipeParams) -> SeedSelection:
    """The settings selection reads: a recipe that selects seeds has them (its settings' base)."""
    assert isinstance(params, SeedSelection), f"{type(params).__name__} has no seed-selection settings"
    return params


def length(text: str, unit: Literal["chars", "words"]) -> int:
    return len(text) if unit == "chars" else len(text.split())


def band(values: list[int], percentiles: tuple[float, float]) -> Band:
    if not values:
        return (0.0, 0.0)
    low, high = np.percentile(np.asarray(values), percentiles)
    return float(low), float(high)


@dataclass(frozen=True)
class Bands:
    """The length bands of the seed collection's queries and positive passages."""

    query: Band = (0.0, 0.0)
    passage: Band = (0.0, 0.0)

    @classmethod
    def of(cls, pairs: Iterable[SeedPair], params: SeedSelection) -> tuple[Self, int]:
        """The bands of these pairs at the configured percentiles, and how many pairs there were."""
        query_lengths: list[int] = []
        passage_lengths: list[int] = []
        for pair in pairs:
            query_lengths.append(length(pair.query.text, params.length_unit))
            passage_lengths.extend(length(p.text, params.length_unit) for p in pair.positives)
        query = band(query_lengths, params.query_length_percentiles)
        return cls(query, band(passage_lengths, params.passage_length_percentiles)), len(query_lengths)


@dataclass(frozen=True)
class Candidate:
    """A seed pair to decide; ``drawn``: in the sample, were it eligible (the sample needs the run's limit);
    ``shared``: the eligible query that may seed its passage instead, and how many eligible queries have that
    passage as their one positive (``one_query_per_passage``)."""

    pair: SeedPair
    drawn: bool = False
    shared: tuple[str, int] | None = None


@dataclass(frozen=True, kw_only=True)
class SelectSeeds(RuleStage[Candidate]):
    """Every pair of the seed source is rejected with its reasons, passed (drawn), or set aside."""

    name: str = "select"
    bands: Bands = field(default_factory=Bands)  # the collection's, computed once per run by ``prepared``
    n_pairs: int = 0

    def prepared(self, ctx: RunContext) -> Self:
        bands, n_pairs = Bands.of(ctx.source.pairs(), selection(ctx.params))
        return replace(self, bands=bands, n_pairs=n_pairs)

    def total(self, ctx: RunContext) -> int:
        return self.n_pairs

    def inputs(self, ctx: RunContext) -> Iterator[list[Candidate]]:
        return candidates(ctx.source.pairs, self.bands, selection(ctx.params), ctx.config.limit, ctx.progress.note)

    def decide(self, env: Env, page: list[Candidate]) -> Iterable[Decided]:
        return [self.outcome(env, candidate) for candidate in page]

    def outcome(self, env: Env, candidate: Candidate) -> Decided:
        """A pair outside the rules is rejected with a verdict per rule it breaks; an eligible one passes if drawn."""
        pair = candidate.pair
        seed_id = item_id("seed", [], pair.query.query_id)
        found = reasons(pair, self.bands, selection(env.params))
        if candidate.shared is not None:
            kept_by, n = candidate.shared
            doc_id = pair.positives[0].doc_id
            reason = (
                f"passage {doc_id} is the one positive of {n} eligible queries; only query {kept_by}, the first "
                "the sample would draw, may seed it"
            )
            found.append(Broken("rule:one_query_per_passage", "one query per passage", n, 1, reason))
        if found:
            verdicts = [
                env.verdict(
                    seed_id,
                    "reject",
                    judge=b.judge,
                    reason=b.reason,
                    score=b.measured,
                    threshold=b.threshold,
                    rule=b.rule,
                )
                for b in found
            ]
            return seed_id, Outcome(
                "reject", items=[seed_item(env, seed_id, pair, "rejected")], verdicts=verdicts, n_out=0
            )
        if candidate.drawn:
            return seed_id, Outcome("pass", items=[seed_item(env, seed_id, pair, "ok")])
        return seed_id, Outcome("set_aside")


def candidates(
    pairs: Callable[[], Iterable[SeedPair]],
    bands: Bands,
    params: SeedSelection,
    limit: int | None,
    note: Callable[[str], None] | None = None,
) -> Iterator[list[Candidate]]:
    """Pages of the ineligible pairs as they come, then of the eligible ones, each marked whether the sample of
    ``limit`` (none: all) drew it. The eligible pairs are read again for their pages, not held: memory keeps
    their query ids (and, while they are read, their passages', one query per passage), however many seeds
    there are. Of eligible queries whose one positive is the same passage, the one the sample would draw
    first keeps it and the others are rejected, with ``one_query_per_passage``. ``note`` hears how many
    one-positive seeds the length bands took away: seeds that were selected already lose about three
    quarters to bands computed on them again, and must not silently."""
    eligible: list[str] = []
    banded = 0
    kept: dict[str, tuple[str, int]] = {}  # a passage -> the eligible query that may seed it, and how many have it
    passed_over: set[str] = set()  # eligible queries whose passage another may seed

    def drawn_by(query_id: str) -> str:  # what the sample orders queries by
        return f"{params.seed}:{query_id}"

    def ineligible() -> Iterator[Candidate]:
        nonlocal banded
        for pair in pairs():
            if reasons(pair, bands, params):
                banded += len(pair.positives) == 1
                yield Candidate(pair)
            else:
                eligible.append(pair.query.query_id)
                if params.one_query_per_passage:
                    query_id, doc_id = pair.query.query_id, pair.positives[0].doc_id
                    if (held := kept.get(doc_id)) is None:
                        kept[doc_id] = (query_id, 1)
                    elif held[0] != query_id and query_id not in passed_over:  # (a query read twice is one)
                        (first,) = hash_sample((held[0], query_id), 1, key=drawn_by)  # as the sample would
                        kept[doc_id] = (first, held[1] + 1)
                        passed_over.add(query_id if first == held[0] else held[0])

    yield from _paged(ineligible())
    if note is not None and banded:
        note(
            f"select: the length bands reject {banded:,} of {banded + len(eligible):,} seeds with one positive; "
            "seeds selected already (InstructIR's filtered_version) take --set select=already_selected"
        )
    kept = {doc_id: held for doc_id, held in kept.items() if held[1] > 1}  # the others are needed no more
    if passed_over:
        eligible[:] = [query_id for query_id in eligible if query_id not in passed_over]
    keep = len(eligible) if limit is None else limit
    chosen = set(hash_sample(eligible, keep, key=drawn_by))
    eligible.clear()

    def decided(pair: SeedPair) -> Candidate:
        query_id = pair.query.query_id
        held = kept.get(pair.positives[0].doc_id)
        if held is not None and held[0] != query_id:
            return Candidate(pair, shared=held)
        return Candidate(pair, query_id in chosen)

    yield from _paged(decided(pair) for pair in pairs() if not reasons(pair, bands, params))


def _paged(candidates: Iterable[Candidate]) -> Iterator[list[Candidate]]:
    page: list[Candidate] = []
    for candidate in candidates:
        page.append(candidate)
        if len(page) == PAGE:
            yield page
            page = []
    if page:
        yield page


@dataclass(frozen=True)
class Broken:
    """A selection rule a pair breaks: its judge, its name, the measured value, the limit it crossed, and why."""

    judge: str
    rule: str
    measured: float
    threshold: float
    reason: str


def reasons(pair: SeedPair, bands: Bands, params: SeedSelection) -> list[Broken]:
    """Why a pair cannot be a seed: not exactly one positive, or a query or passage length out of its band."""
    unit = params.length_unit
    found = []
    if len(pair.positives) != 1:
        n = len(pair.positives)
        found.append(
            Broken("rule:positives", "exactly one judged positive", n, 1, f"{n} judged positives; exactly one needed")
        )
    if params.select == "already_selected":
        return found
    q_len = length(pair.query.text, unit)
    if not bands.query[0] <= q_len <= bands.query[1]:
        low, high = params.query_length_percentiles
        rule = f"query length ({unit}) outside the {low:g}-{high:g} percentile band"
        limits = f"[{bands.query[0]:g}, {bands.query[1]:g}]"
        reason = f"query length {q_len} {unit} outside the {low:g}-{high:g} percentile band {limits}"
        found.append(Broken("rule:query_length", rule, q_len, _nearest(q_len, bands.query), reason))
    p_len = length(pair.positives[0].text, unit)
    inside = bands.passage[0] <= p_len <= bands.passage[1]
    if inside != (params.passage_band == "inside"):
        low, high = params.passage_length_percentiles
        where = "inside" if inside else "outside"
        rule = f"passage length ({unit}) {where} the {low:g}-{high:g} percentile band"
        limits = f"[{bands.passage[0]:g}, {bands.passage[1]:g}]"
        reason = f"passage length {p_len} {unit} {where} the {low:g}-{high:g} percentile band {limits}"
        found.append(Broken("rule:passage_length", rule, p_len, _nearest(p_len, bands.passage), reason))
    return found


def _nearest(value: float, band: Band) -> float:
    """The end of the band nearest a value: the limit it crossed, or the one it missed by least."""
    return min(band, key=lambda end: abs(end - value))


def seed_item(env: Env, seed_id: str, pair: SeedPair, status: Literal["ok", "rejected"]) -> ItemRecord:
    passage = pair.positives[0]
    payload = {  # a ``SeedItem``, its keys in the order the warehouse has always held them
        "query_id": pair.query.query_id,
        "query": pair.query.text,
        "doc_id": passage.doc_id,
        "title": passage.title,
        "passage": passage.text,
        "positives": [p.doc_id for p in pair.positives],
    }
    return ItemRecord(
        run_id=env.run_id,
        item_id=seed_id,
        stage=env.stage,
        kind="seed",
        group_id=pair.query.query_id,
        payload=payload,
        status=status,
    )
