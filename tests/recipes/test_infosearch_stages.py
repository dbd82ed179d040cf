"""InfoSearch's own stages, called directly: keyword conditions, query negatives and reversals (LLM stages);
collection, the rules, the retrieval panel and assembly (rule stages), each deciding hand-made pages."""

from __future__ import annotations

import json
from typing import Any

from ifsynth.flows.recipes.infosearch.assemble import AssembleInfoSearch, Core, release_rows
from ifsynth.flows.recipes.infosearch.collect import CollectSeeds, DimensionSeeds
from ifsynth.flows.recipes.infosearch.document_rules import CheckDocuments, Checked, conditioned
from ifsynth.flows.recipes.infosearch.keywords import ExtractKeywords
from ifsynth.flows.recipes.infosearch.negatives import GenerateNegatives
from ifsynth.flows.recipes.infosearch.panel import Ranker, Review, ReviewDocuments, judging
from ifsynth.flows.recipes.infosearch.reversal import ReverseInstructions
from ifsynth.flows.run.stage import Outcome
from ifsynth.flows.stages.assemble import Rows
from ifsynth.prompts.registry import Prompts
from ifsynth.schemas.answers import KeywordCondition, Reversal, query_negatives
from ifsynth.schemas.records import ItemRecord
from ifsynth.schemas.seeds import SeedPair, SeedPassage, SeedQuery
from ifsynth.warehouse.keys import item_id
from tests.helpers import at, env, item, ok, unusable

DOCUMENT = item("collect", "document", dimension="keyword", query_id="7", query="tides", position=2, condition=None,
                origin="seed", doc_id="d2", passage="Tides follow the moon.", ord=2)  # fmt: skip


def test_keywords_serve_only_documents_without_a_condition() -> None:
    stage = ExtractKeywords(max_tokens=64)
    assert stage.keep is not None and stage.keep(DOCUMENT)
    assert not stage.keep(DOCUMENT.model_copy(update={"payload": {**DOCUMENT.payload, "condition": "moon"}}))
    assert not stage.keep(DOCUMENT.model_copy(update={"kind": "query"}))
    (ask,) = stage.build(env("infosearch"), DOCUMENT)
    assert ask.schema is KeywordCondition and "Tides follow the moon." in ask.prompt.messages[-1]["content"]


def test_a_keyword_becomes_the_documents_condition() -> None:
    ctx = env("infosearch")
    answer = KeywordCondition(explanation="the moon drives tides", keyword="moon")
    (made,) = ExtractKeywords(max_tokens=64).handle(at(ctx, "keywords"), DOCUMENT, [ok(answer)]).items
    assert made.kind == "document" and made.item_id == item_id("keyword", [DOCUMENT.item_id], "moon")
    assert made.payload["condition"] == "moon" and made.payload["keyword_reason"] == "the moon drives tides"
    assert made.ord == DOCUMENT.ord and made.call_keys == ("key-1",)


def test_negatives_are_asked_from_the_core_query_alone_per_positive() -> None:
    ctx = env("infosearch")
    core = item("collect", "query", dimension="audience", query_id="7", query="tides", conditions=["layman", "expert"],
                passages=[{"doc_id": "d1", "title": "", "text": "Tides follow the moon."}])  # fmt: skip
    (ask,) = GenerateNegatives(per_positive=3, max_tokens=128).build(ctx, core)
    assert ask.schema is query_negatives(6), "three per positive, two positives (one per condition)"
    assert "Tides follow the moon." not in ask.prompt.messages[-1]["content"], "the paper shows the query only"
    assert "Query: tides" in ask.prompt.messages[-1]["content"]
    stage = GenerateNegatives(per_positive=1, max_tokens=128)
    outcome = stage.handle(at(ctx, "negatives"), core, [ok(query_negatives(2)(passages=["Tidy rooms.", "Tide pods."]))])
    first, second = outcome.items
    assert first.item_id == item_id("negative", [core.item_id], 1, "Tidy rooms.") and first.kind == "negative"
    assert first.payload == {
        "dimension": "audience",
        "query_id": "7",
        "query": "tides",
        "passage": "Tidy rooms.",
        "number": 1,
    }
    assert (second.ord, second.payload["number"]) == (2, 2)
    unanswered = stage.settle(at(ctx, "negatives"), core, [unusable()])
    assert isinstance(unanswered, Outcome) and unanswered.decision == "parse_error"


def test_a_reversal_is_the_core_query_verbatim_then_the_negated_restriction() -> None:
    ctx = env("infosearch")
    instruction = item(
        "instructions", "instruction", query="tides", instruction="I want tides. For experts.",
        restated_query="I want tides.", restriction="For experts.", dimension="audience", ord=1,
    )  # fmt: skip
    stage = ReverseInstructions(max_tokens=64)
    (ask,) = stage.build(ctx, instruction)
    assert ask.schema is Reversal and "For experts." in ask.prompt.messages[-1]["content"]
    answer = Reversal(reversed_restriction="Not for experts.")
    (made,) = stage.handle(at(ctx, "reversal"), instruction, [ok(answer)]).items
    assert made.payload["reversed_instruction"] == "tides. Not for experts."
    assert made.item_id == item_id("reversal", [instruction.item_id], "tides. Not for experts.")
    assert made.payload["instruction"] == "I want tides. For experts.", "the instruction it negates stays"


def pair(query_id: str, *doc_ids: str) -> SeedPair:
    positives = tuple(SeedPassage(doc_id=doc_id, title=f"title {doc_id}", text=f"text {doc_id}") for doc_id in doc_ids)
    return SeedPair(query=SeedQuery(query_id=query_id, text=f"query {query_id}"), positives=positives)


def collected(dimension: str, pairs: list[SeedPair], limit: int | None = None) -> dict[str, Outcome]:
    decided = CollectSeeds().decide(at(env("infosearch"), "collect"), [DimensionSeeds(dimension, pairs, limit)])
    return {str(input_id): outcome for input_id, outcome in decided}


def test_collect_rejects_a_seed_short_of_positives_and_draws_the_limit_of_the_rest_by_hash() -> None:
    pairs = [pair("a", "d1"), pair("b", "d2", "d3"), pair("c", "d4", "d5"), pair("d", "d6", "d7")]
    outcomes = collected("language", pairs, limit=2)  # one positive per condition: two needed
    short = outcomes[item_id("core", [], "language", "a")]
    (verdict,) = short.verdicts
    assert short.decision == "reject" and short.n_out == 0 and [i.status for i in short.items] == ["rejected"]
    assert (verdict.score, verdict.threshold) == (1, 2)
    assert verdict.reason == "seed_positives: 1 judged positives, language needs at least 2"
    drawn = {key for key, outcome in outcomes.items() if outcome.items and outcome.decision == "pass"}
    assert len(drawn) == 2 and len(outcomes) == 4, "the third eligible seed passes on nothing"
    again = collected("language", pairs[::-1], limit=2)
    assert {key for key, outcome in again.items() if outcome.items and outcome.decision == "pass"} == drawn, (
        "the draw does not depend on the seeds' order"
    )


def test_a_collected_core_query_brings_one_document_per_condition_in_order() -> None:
    (outcome,) = collected("language", [pair("b", "d2", "d3")]).values()
    core, first, second = outcome.items
    assert core.kind == "query" and core.group_id == "language-b" and outcome.n_out == 3
    assert core.payload["conditions"] == ["Chinese", "English"]
    assert [(d.payload["position"], d.payload["condition"], d.payload["doc_id"]) for d in (first, second)] == [
        (1, "Chinese", "d2"),
        (2, "English", "d3"),
    ]
    assert first.item_id == item_id("seeddoc", [core.item_id], 1, "d2") and first.payload["origin"] == "seed"


def test_a_rewritten_dimension_keeps_its_seed_conditions_own_positive() -> None:
    (both,) = collected("audience", [pair("x", "d1", "d2")]).values()
    (alone,) = collected("audience", [pair("y", "d3")]).values()
    for outcome, doc_id in ((both, "d2"), (alone, "d3")):
        (_, document) = outcome.items
        assert (document.payload["position"], document.payload["condition"]) == (2, "expert")
        assert document.payload["doc_id"] == doc_id


POSITIVE: dict[str, Any] = {"query_id": "kw1", "position": 1, "origin": "seed", "doc_id": "d1"}


def test_rules_check_what_has_a_condition_and_query_negatives_only() -> None:
    assert conditioned(DOCUMENT.model_copy(update={"payload": {**DOCUMENT.payload, "condition": "moon"}}))
    assert conditioned(item("negatives", "negative"))
    assert not conditioned(DOCUMENT), "a keyword dimension's seed waits for its keyword"
    assert not conditioned(item("collect", "query"))


def test_rules_reject_with_the_first_failing_rule_and_keep_the_rest_as_documents() -> None:
    keyword = item("keywords", "document", group="keyword-kw1", dimension="keyword", query="storing basil",
                   condition="olive oil", passage="Blend basil with olive oil.", **POSITIVE)  # fmt: skip
    keyword = keyword.model_copy(update={"call_keys": ("key-kw",)})
    sentence = item("rewrite", "rewrite", group="length-l1", dimension="length", query="tides", condition="sentence",
                    passage=" ".join(["word"] * 80) + ".", **{**POSITIVE, "origin": "rewrite"})  # fmt: skip
    negative = item("negatives", "negative", group="audience-7", dimension="audience", query_id="7",
                    query="how to store fresh basil", passage="Tomatoes ripen on a windowsill.", number=1)  # fmt: skip
    page = [
        Checked(keyword, ["Freeze basil in olive oil."]),
        Checked(keyword, ["Keep basil in water."]),
        Checked(sentence, []),
        Checked(negative, []),
    ]
    decided = list(CheckDocuments(sources=()).decide(at(env("infosearch"), "rules"), page))
    assert [input_id for input_id, _ in decided] == [entry.document.item_id for entry in page]
    (_, shared), (_, kept), (_, long), (_, off_topic) = decided
    assert shared.decision == "reject" and not shared.items
    assert (shared.verdicts[0].score, shared.verdicts[0].threshold) == (1, 0)
    assert shared.verdicts[0].reason.startswith("keyword_not_in_siblings: `olive oil` occurs in 1 of the 1")
    (made,) = kept.items
    assert (
        kept.decision == "pass" and made.kind == "document" and made.item_id == item_id("document", [keyword.item_id])
    )
    assert made.payload == keyword.payload and made.call_keys == ("key-kw",)
    assert [rule.split(":")[0] for rule in kept.verdicts[0].reason.split("; ")] == [
        "keyword_specific",
        "keyword_in_document",
        "keyword_not_in_siblings",
    ]
    assert long.decision == "reject" and long.verdicts[0].reason.startswith("word_count: 80 words, outside")
    assert off_topic.decision == "reject" and off_topic.verdicts[0].reason.startswith("query_overlap: uses 0 of")


def test_a_rewrite_that_passes_continues_as_a_document() -> None:
    rewrite = item("rewrite", "rewrite", group="length-l1", dimension="length", query="tides", condition="sentence",
                   passage="Tides follow the moon.", **{**POSITIVE, "origin": "rewrite"})  # fmt: skip
    ((_, outcome),) = CheckDocuments(sources=()).decide(at(env("infosearch"), "rules"), [Checked(rewrite, [])])
    assert outcome.decision == "pass" and [i.kind for i in outcome.items] == ["document"]


PANELLED = item("rules", "document", group="keyword-kw1", dimension="keyword", query="tides", condition="moon",
                passage="Tides follow the moon.", **{**POSITIVE, "position": 2})  # fmt: skip
MISSES = Ranker("bm25", {"keyword-kw1": {"keyword-kw1_doc1": 2.0}}, any_script=False)
PLACES = Ranker("dense", {"keyword-kw1": {"keyword-kw1_doc1": 2.0, "keyword-kw1_doc2": 1.0}}, any_script=True)


def reviewed(*panel: Ranker, **params: Any) -> Outcome:
    ((input_id, outcome),) = ReviewDocuments().decide(
        env("infosearch", "panel", **params), [Review(PANELLED, list(panel))]
    )
    assert input_id == PANELLED.item_id
    return outcome


def test_the_panel_rejects_what_enough_of_enough_rankers_miss() -> None:
    both = reviewed(MISSES, Ranker("other", {}, any_script=True))
    (verdict,) = both.verdicts
    assert both.decision == "reject" and both.n_out == 0 and verdict.judge == "rule:panel"
    assert verdict.reason == "panel: 2 of 2 rankers place it outside their top 50 for its query (bm25 >50, other >50)"
    assert (verdict.score, verdict.threshold) == (2, 1)
    placed = reviewed(MISSES, PLACES, panel_miss_share=1.0)
    assert placed.decision == "pass" and placed.verdicts[0].reason == (
        "panel: 1 of 2 rankers place it outside their top 50 for its query (bm25 >50, dense 2)"
    )
    assert reviewed(PLACES, PLACES, panel_depth=1).decision == "reject", "ranked second, below a depth of 1"


def test_bm25_abstains_on_a_positive_in_another_script_than_its_query() -> None:
    assert judging([MISSES, PLACES], foreign=True) == [PLACES]
    assert judging([MISSES, PLACES], foreign=False) == [MISSES, PLACES]


def test_a_panel_too_small_to_reject_keeps_its_flag_on_record() -> None:
    alone = reviewed(MISSES)
    assert alone.decision == "pass" and alone.n_out == 1
    assert alone.verdicts[0].reason.startswith("panel: flagged, kept: 1 of 1 rankers place it outside")
    assert alone.verdicts[0].reason.endswith("rejecting takes 2 rankers (add panel_runs)")
    nobody = reviewed()
    assert nobody.decision == "pass" and nobody.verdicts[0].reason.endswith("(no ranker can judge it)")


CORE = item("collect", "query", group="audience-7", dimension="audience", query_id="7", query="tides",
            conditions=["layman", "expert"], passages=[])  # fmt: skip


def finished(position: int, condition: str, origin: str = "rewrite") -> ItemRecord:
    return item(
        "reversal", "reversal", group="audience-7", ord=position, dimension="audience", query_id="7", query="tides",
        position=position, condition=condition, origin=origin, doc_id="d1", title="Tides", passage=f"for a {condition}",
        instruction=f"I want tides. For a {condition}.", restriction=f"For a {condition}.",
        reversed_instruction=f"tides. Not for a {condition}.",
    )  # fmt: skip


NEGATIVE = item("rules", "negative", group="audience-7", ord=1, dimension="audience", query_id="7", query="tides",
                passage="Tidy rooms.", number=1)  # fmt: skip


def test_assembly_passes_a_complete_core_query_and_says_what_an_incomplete_one_lacks() -> None:
    layman, expert = finished(1, "layman"), finished(2, "expert", "seed")
    page = [Core(CORE, [layman, expert, finished(2, "expert")], [NEGATIVE]), Core(CORE, [expert], [])]
    (_, whole), (input_id, short) = AssembleInfoSearch().decide(at(env("infosearch"), "assemble"), page)
    assert whole.decision == "pass" and whole.n_out == 2 and not whole.verdicts, "one document per condition"
    (verdict,) = short.verdicts
    assert input_id == CORE.item_id and short.decision == "reject" and (verdict.score, verdict.threshold) == (1, 2)
    assert verdict.reason == (
        "complete_core_query: 1 of 2 conditions complete (missing positions [1]); 0 query negatives, at least 1 needed"
    )


def test_release_rows_key_og_changed_and_reversed_over_the_core_querys_positives() -> None:
    rows = Rows()
    release_rows(rows, "audience-7", "audience", [finished(1, "layman"), finished(2, "expert", "seed")], [NEGATIVE])
    assert [(d["doc_id"], d["title"]) for d in rows.docs] == [
        ("audience-7_doc1", ""),
        ("audience-7_doc2", "Tides"),
        ("audience-7_neg1", ""),
    ], "only a seed keeps its title"
    assert json.loads(rows.docs[2]["meta"]) == {"condition": None, "dimension": "audience", "item": NEGATIVE.item_id,
                                                 "role": "query_negative"}  # fmt: skip
    scores = {(q["mode"], q["query_id"], q["doc_id"]): q["score"] for q in rows.qrels}
    assert scores == {
        (mode, f"audience-7_{own}", f"audience-7_doc{doc}"): score
        for own in (1, 2)
        for doc in (1, 2)
        for mode, score in (("og", 1), ("changed", int(doc == own)), ("reversed", int(doc != own)))
    }
    first = [q for q in rows.queries if q["query_id"] == "audience-7_1"]
    assert [(q["mode"], q["instruction"]) for q in first] == [
        ("og", ""),
        ("changed", "I want tides. For a layman."),
        ("reversed", "tides. Not for a layman."),
    ]


def test_an_instruction_states_its_condition_without_negation() -> None:
    """The reversal adds the negation; an instruction asked to rule the sibling conditions out would carry one
    already, and its reversal would negate a negation."""
    texts = {"dimension": "length", "query": "q", "condition": "sentence", "siblings": ["paragraph", "article"]}
    user = " ".join(Prompts().render("infosearch/instructions", **texts).messages[-1]["content"].split())
    assert "rules out" not in user and "stated positively" in user
