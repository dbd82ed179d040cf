"""Seed selection's halves on plain values: the length bands, the draw, and each pair's decision."""

from __future__ import annotations

from collections import Counter

from ifsynth.flows.recipes.instructir.settings import InstructIRParams
from ifsynth.flows.stages.select import Bands, Candidate, SelectSeeds, candidates
from ifsynth.schemas.seeds import SeedPair, SeedPassage, SeedQuery
from ifsynth.warehouse.keys import item_id, sha256
from tests.helpers import at, env

PARAMS = InstructIRParams.model_validate({"length_unit": "words", "passage_band": "inside"})


def pair(query_id: str, words: int, *passage_words: int) -> SeedPair:
    positives = [SeedPassage(doc_id=f"d{query_id}{n}", title="T", text="p " * w) for n, w in enumerate(passage_words)]
    return SeedPair(query=SeedQuery(query_id=query_id, text="w " * words), positives=tuple(positives))


PAIRS = [pair(f"q{n}", n, 10) for n in range(1, 21)]  # query lengths 1..20 words, band [5.75, 15.25]
BANDS, _ = Bands.of(PAIRS, PARAMS)


def test_the_bands_are_the_configured_percentiles_of_the_collection() -> None:
    bands, count = Bands.of(PAIRS, PARAMS)
    assert bands == Bands(query=(5.75, 15.25), passage=(10.0, 10.0)) and count == 20


def test_ineligible_pairs_come_first_then_eligible_ones_marked_by_the_draw() -> None:
    pages = list(candidates(lambda: PAIRS, BANDS, PARAMS, limit=4))
    listed = [c for page in pages for c in page]
    assert [c.pair.query.query_id for c in listed[:10]] == [f"q{n}" for n in (1, 2, 3, 4, 5, 16, 17, 18, 19, 20)]
    assert not any(c.drawn for c in listed[:10]) and sum(c.drawn for c in listed[10:]) == 4
    again = [c for page in candidates(lambda: reversed(PAIRS), BANDS, PARAMS, limit=4) for c in page if c.drawn]
    assert {c.pair.query.query_id for c in again} == {c.pair.query.query_id for c in listed if c.drawn}, "any order"


def test_eligible_pairs_are_read_again_for_their_pages_not_held_from_the_decisions() -> None:
    reads: list[list[SeedPair]] = []

    def fresh() -> list[SeedPair]:  # each read makes new pair objects, as a seed file's does
        reads.append([pair.model_copy(deep=True) for pair in PAIRS])
        return reads[-1]

    listed = [c for page in candidates(fresh, BANDS, PARAMS, limit=4) for c in page]
    assert len(reads) == 2
    assert all(any(c.pair is p for p in reads[0]) for c in listed[:10]), "ineligible: as they come"
    assert all(any(c.pair is p for p in reads[1]) for c in listed[10:]), "eligible: from the second read"


def test_no_limit_draws_every_eligible_pair() -> None:
    listed = [c for page in candidates(lambda: PAIRS, BANDS, PARAMS, limit=None) for c in page]
    assert sum(c.drawn for c in listed) == 10


def test_a_drawn_pair_passes_as_a_seed_and_an_undrawn_one_is_set_aside() -> None:
    stage, e = SelectSeeds(bands=BANDS), at(env("instructir", length_unit="words", passage_band="inside"), "select")
    (drawn, kept), (undrawn, aside) = stage.decide(e, [Candidate(PAIRS[9], drawn=True), Candidate(PAIRS[10])])
    assert drawn == item_id("seed", [], "q10") and kept.decision == "pass" and not kept.verdicts
    (seed,) = kept.items
    assert (seed.item_id, seed.kind, seed.group_id, seed.stage, seed.status) == (drawn, "seed", "q10", "select", "ok")
    assert seed.payload == {"query_id": "q10", "query": "w " * 10, "doc_id": "dq100", "title": "T",
                            "passage": "p " * 10, "positives": ["dq100"]}  # fmt: skip
    assert undrawn == item_id("seed", [], "q11") and aside.decision == "set_aside" and not aside.items


def test_an_ineligible_pair_is_rejected_with_a_verdict_per_rule_and_kept_on_record() -> None:
    stage, e = SelectSeeds(bands=BANDS), at(env("instructir", length_unit="words", passage_band="inside"), "select")
    ((seed_id, outcome),) = stage.decide(e, [Candidate(pair("q30", 30, 5, 10), drawn=True)])
    assert outcome.decision == "reject" and outcome.n_out == 0 and outcome.items[0].status == "rejected"
    assert {v.item_id for v in outcome.verdicts} == {seed_id}
    found = {v.judge: (v.rule, v.score, v.threshold, v.reason) for v in outcome.verdicts}
    assert found == {
        "rule:positives": ("exactly one judged positive", 2, 1, "2 judged positives; exactly one needed"),
        "rule:query_length": (
            "query length (words) outside the 25-75 percentile band", 30, 15.25,
            "query length 30 words outside the 25-75 percentile band [5.75, 15.25]",
        ),
        "rule:passage_length": (
            "passage length (words) outside the 25-75 percentile band", 5, 10,
            "passage length 5 words outside the 25-75 percentile band [10, 10]",
        ),
    }  # fmt: skip


def test_every_pair_is_decided_once() -> None:
    stage, e = SelectSeeds(bands=BANDS), at(env("instructir", length_unit="words", passage_band="inside"), "select")
    decided = [d for page in candidates(lambda: PAIRS, BANDS, PARAMS, limit=4) for d in stage.decide(e, page)]
    assert Counter(o.decision for _, o in decided) == {"reject": 10, "pass": 4, "set_aside": 6}
    assert len({seed_id for seed_id, _ in decided}) == 20


def test_a_passage_that_is_the_positive_of_several_queries_seeds_the_one_the_sample_draws_first() -> None:
    """InstructIR's ids, ``<pid>_<k>``, name one rewrite of a passage per k: two seeds of one passage made two
    documents of one id, and the release failed at the end of the run. The query the sample would draw first
    keeps the passage, whatever the file's order; the others are rejected, saying which query seeds it."""
    shared = [p.model_copy(update={"positives": PAIRS[9].positives}) for p in PAIRS[10:13]]  # q11-q13: q10's passage
    seeds = [*PAIRS[:10], *shared, *PAIRS[13:]]
    stage, e = SelectSeeds(bands=BANDS), at(env("instructir", length_unit="words", passage_band="inside"), "select")

    def decided(pairs: list[SeedPair], params: InstructIRParams = PARAMS) -> dict[str | None, tuple[str, list[str]]]:
        listed = [d for page in candidates(lambda: pairs, BANDS, params, limit=None) for d in stage.decide(e, page)]
        return {seed_id: (o.decision, [v.reason for v in o.verdicts]) for seed_id, o in listed}

    found = decided(seeds)
    sharing = {f"q{n}": item_id("seed", [], f"q{n}") for n in range(10, 14)}
    first = min(sharing, key=lambda q: sha256(f"{PARAMS.seed}:{q}"))
    assert found[sharing[first]] == ("pass", []) and Counter(o for o, _ in found.values()) == {"reject": 13, "pass": 7}
    reason = (
        f"passage dq100 is the one positive of 4 eligible queries; only query {first}, the first the sample would "
        "draw, may seed it"
    )
    assert all(found[s] == ("reject", [reason]) for q, s in sharing.items() if q != first)
    assert decided(seeds[::-1]) == found, "any order"
    assert decided([*seeds, *shared]) == found, "a query read twice is one query"
    limited = [c for page in candidates(lambda: seeds, BANDS, PARAMS, limit=9) for c in page]
    drawn = {c.pair.query.query_id for c in limited if c.drawn}
    assert len(drawn) == 7 and first in drawn, "the sample draws from the rest: all seven"
    alike = decided(seeds, PARAMS.model_copy(update={"one_query_per_passage": False}))
    assert all(alike[s][0] == "pass" for s in sharing.values()), "InF-IR's tuples name their own passages"
