"""InfoSearch's own LLM stages, called directly: keyword conditions, query negatives, reversals."""

from __future__ import annotations

from ifsynth.flows.recipes.infosearch.keywords import ExtractKeywords
from ifsynth.flows.recipes.infosearch.negatives import GenerateNegatives
from ifsynth.flows.recipes.infosearch.reversal import ReverseInstructions
from ifsynth.schemas.answers import KeywordCondition, Reversal, query_negatives
from ifsynth.warehouse.keys import item_id
from tests.helpers import at, env, item, ok, unusable

DOCUMENT = item("collect", "document", dimension="keyword", query="tides", passage="Tides follow the moon.", ord=2)


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
    assert stage.handle(at(ctx, "negatives"), core, [unusable()]).decision == "parse_error"


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
