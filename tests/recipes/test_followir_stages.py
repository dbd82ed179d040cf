"""FollowIR's own stages, called directly: topic selection, the choice of an alteration, the training pairs, the
rerank pool and the release rows."""

from __future__ import annotations

import json
from typing import Any

from ifsynth.flows.recipes.followir.alteration import Rejudged, SelectAlteration
from ifsynth.flows.recipes.followir.assemble import evaluation_rows, training_rows
from ifsynth.flows.recipes.followir.documents import Agreed, balance
from ifsynth.flows.recipes.followir.pool import Ranked, pooled
from ifsynth.flows.recipes.followir.topics import Drawn, SelectTopics
from ifsynth.schemas.followir import RELEVANT, SPOT_CHECK, Role
from ifsynth.schemas.records import ItemRecord
from ifsynth.schemas.seeds import SeedPair, SeedPassage, SeedQuery
from ifsynth.warehouse.keys import item_id
from tests.helpers import at, env, item

TOPIC: dict[str, Any] = {
    "query_id": "f101", "query": "rhino horn poaching", "title": "Rhinos", "description": "Poaching of rhinos.",
    "narrative": "Reports on poaching are relevant.", "instruction": "Reports on poaching are relevant.",
    "grades": {"d1": 2, "d2": 1, "d3": 1, "d4": 0, "d5": 0},
}  # fmt: skip


def topic_pair(query_id: str, positives: int, negatives: int = 3, narrative: str = "Narrative.") -> SeedPair:
    query = SeedQuery(query_id=query_id, text="", title=f"title {query_id}", description=f"desc {query_id}",
                      narrative=narrative)  # fmt: skip
    return SeedPair(
        query=query,
        positives=tuple(SeedPassage(doc_id=f"{query_id}-p{n}", text="rel", grade=2) for n in range(positives)),
        negatives=tuple(SeedPassage(doc_id=f"{query_id}-n{n}", text="non", grade=0) for n in range(negatives)),
    )


def test_selection_keeps_drawn_topics_with_their_judged_documents_and_says_why_others_fail() -> None:
    ctx = at(env("followir", spot_checks=2), "select")
    page = [
        Drawn(topic_pair("f1", 2), drawn=True),
        Drawn(topic_pair("f2", 2, narrative=" "), drawn=True),
        Drawn(topic_pair("f3", 1), drawn=True),
        Drawn(topic_pair("f4", 2), drawn=False),
    ]
    (kept_id, kept), (_, empty), (_, few), (_, undrawn) = SelectTopics().decide(ctx, page)
    topic, *judged = kept.items
    assert kept_id == item_id("topic", [], "f1") == topic.item_id and kept.decision == "pass" and kept.n_out == 1
    assert topic.payload["query"] == "desc f1", "the description, for an evaluation set"
    assert topic.payload["grades"] == {"f1-p0": 2, "f1-p1": 2, "f1-n0": 0, "f1-n1": 0, "f1-n2": 0}
    roles = [(j.payload["role"], j.ord) for j in judged]
    assert roles == [(RELEVANT, 1), (RELEVANT, 2), (SPOT_CHECK, 3), (SPOT_CHECK, 4)], "2 spot checks, sorted"
    assert empty.decision == "reject" and empty.verdicts[0].reason.startswith("the topic has no narrative")
    assert empty.items[0].status == "rejected"
    assert few.verdicts[0].reason == "1 judged-relevant documents; at least 2 needed"
    assert undrawn.decision == "set_aside"


def test_a_training_topic_brings_no_judged_documents() -> None:
    ctx = at(env("followir", mode="train"), "select")
    ((_, outcome),) = SelectTopics().decide(ctx, [Drawn(topic_pair("f1", 1), drawn=True)])
    assert [i.kind for i in outcome.items] == ["topic"], "one relevant document is enough for training"


ROLES: dict[str, Role] = {"d1": RELEVANT, "d2": RELEVANT, "d3": RELEVANT, "d4": SPOT_CHECK}


def candidate(k: int, group: str = "f101") -> ItemRecord:
    made = item(
        "alter", "instruction", group, ord=k, **{**TOPIC, "instruction": f"altered {k}", "change": f"c{k}", "k": k}
    )
    return made.model_copy(update={"item_id": f"cand-{group}-{k}"})


def rejudged(k: int, relevant: dict[str, bool], group: str = "f101") -> Rejudged:
    cand = candidate(k, group)
    labels = [
        item("rejudge", "label", group, doc_id=doc, relevant=r).model_copy(update={"parent_ids": (cand.item_id, doc)})
        for doc, r in relevant.items()
    ]
    return Rejudged(cand, labels, ROLES)


def test_the_first_candidate_that_narrows_relevance_enough_is_kept_and_later_ones_set_aside() -> None:
    ctx = at(env("followir"), "select_alteration")
    page = [
        rejudged(1, {"d1": True, "d2": True, "d3": True, "d4": False}),  # flips none
        rejudged(2, {"d1": True, "d2": False, "d3": True, "d4": False}),  # flips 1 of 3
        rejudged(3, {"d1": False, "d2": False, "d3": True, "d4": False}),
        rejudged(1, {"d1": True, "d2": False, "d3": True}, group="f102"),  # d4 missing
    ]
    decided = list(SelectAlteration().decide(ctx, page))
    assert [(input_id, o.decision) for input_id, o in decided] == [
        ("cand-f101-1", "reject"), ("cand-f101-2", "pass"), ("cand-f101-3", "set_aside"), ("cand-f102-1", "reject"),
    ]  # fmt: skip
    none, kept, _, missing = (outcome for _, outcome in decided)
    assert none.verdicts[0].reason == "flips 0 of 3 relevant documents (0%), outside [30%, 70%]"
    assert none.verdicts[0].threshold == 0.3 and none.verdicts[0].judge == "rule:flip_share"
    (altered,) = kept.items
    assert altered.kind == "altered_topic" and altered.parent_ids == ("cand-f101-2",)
    assert (altered.payload["instruction_og"], altered.payload["instruction_changed"]) == (
        TOPIC["narrative"],
        "altered 2",
    )
    assert altered.payload["flipped"] == ["d2"] and altered.payload["relevant"] == ["d1", "d2", "d3"]
    assert altered.payload["candidate"] == 2 and kept.verdicts[0].score == 1 / 3
    assert missing.verdicts[0].reason.startswith("1 of 4 re-judgments missing (failed or unparsable): d4; flips 1")
    assert missing.verdicts[0].threshold is None


def test_a_candidate_that_makes_a_spot_checked_document_relevant_is_passed_over() -> None:
    ctx = at(env("followir"), "select_alteration")
    ((_, outcome),) = SelectAlteration().decide(ctx, [rejudged(1, {"d1": True, "d2": False, "d3": True, "d4": True})])
    assert outcome.decision == "reject" and not outcome.items
    assert outcome.verdicts[0].reason.startswith("widens relevance: originally non-relevant d4 judged relevant")


def document(label: int, number: int) -> ItemRecord:
    made = item("write_documents", "document", "f101", ord=number, query_id="f101", query="q", instruction="n",
                passage=f"doc {number}", label=label, number=number)  # fmt: skip
    return made.model_copy(update={"item_id": f"doc-{number}"})


def test_a_balanced_pair_holds_the_relevant_and_the_non_relevant_document() -> None:
    ctx = at(env("followir", mode="train"), "balance")
    topic = item("select", "topic", "f101", **TOPIC)
    outcome = balance(ctx, Agreed(topic, {1: document(1, 1), 0: document(0, 3)}))
    (made,) = outcome.items
    assert outcome.decision == "pass" and made.kind == "training_pair" and made.parent_ids[1:] == ("doc-1", "doc-3")
    assert (made.payload["positive"], made.payload["negative"]) == ("doc 1", "doc 3")
    assert made.payload["instruction"] == TOPIC["narrative"]
    assert made.payload["items"] == {"positive": "doc-1", "negative": "doc-3"}
    # FollowIR-train keeps a pair the judge agreed with on one label only (about 1,800 rows over 1,200 pairs)
    (one,) = balance(ctx, Agreed(topic, {1: document(1, 1)})).items
    assert (one.payload["positive"], one.payload.get("negative"), one.payload["items"]) == (
        "doc 1",
        None,
        {"positive": "doc-1"},
    )
    assert [r["doc_id"] for r in training_rows([one], {}).qrels] == ["f101_rel"]
    assert balance(ctx, Agreed(topic, {})).decision == "reject"
    short = balance(at(env("followir", mode="train", pair_needs="both"), "balance"), Agreed(topic, {1: document(1, 1)}))
    assert short.decision == "reject" and not short.items
    (verdict,) = short.verdicts
    assert verdict.reason == "balance: no non-relevant document that the judge agreed with"
    assert (verdict.score, verdict.threshold) == (1, 2)


ALTERED: dict[str, Any] = {
    "query_id": "f101", "query": "rhino horn poaching", "title": "Rhinos", "description": "Poaching of rhinos.",
    "instruction_og": "og narrative", "instruction_changed": "changed narrative", "change": "c2", "candidate": 2,
    "grades": {"d1": 2, "d2": 1, "d4": 0, "d9": 0}, "flipped": ["d2"], "relevant": ["d1", "d2"],
}  # fmt: skip


def test_the_pool_holds_the_relevant_documents_and_each_rankers_top_others() -> None:
    ctx = at(env("followir"), "pool")
    topic = item("select_alteration", "altered_topic", "f101", **ALTERED)
    rankings = {"bm25": ["d1", "x1", "x2", "x3"], "run.trec": ["x2", "d2", "x4", "x5"]}
    (made,) = pooled(ctx, Ranked(topic, rankings), 2).items
    assert made.payload["pool"] == ["d1", "d2", "x1", "x2", "x4"]
    assert made.payload["pool_sources"] == {"bm25": 2, "run.trec": 1}, "x2 was brought by BM25 already"
    assert made.payload["flipped"] == ["d2"], "the topic's fields are carried on"


def test_a_pooled_topic_is_a_query_in_both_modes_with_qrels_within_its_pool() -> None:
    topic = item("pool", "pool", "f101", **ALTERED, pool=["d1", "d2", "d4", "x1"], pool_sources={"bm25": 2})
    rows, top_ranked = evaluation_rows([topic], {"f101": {"short_query": "Find reports."}})
    assert [(q["mode"], q["instruction"]) for q in rows.queries] == [
        ("og", "og narrative"),
        ("changed", "changed narrative"),
    ]
    assert json.loads(rows.queries[0]["meta"]) == {
        "title": "Rhinos", "description": "Poaching of rhinos.", "change": "c2", "item": topic.item_id,
        "short_query": "Find reports.",
    }  # fmt: skip
    scores = {(q["mode"], q["doc_id"]): q["score"] for q in rows.qrels}
    assert scores == {("og", "d1"): 2, ("og", "d2"): 1, ("og", "d4"): 0,
                      ("changed", "d1"): 2, ("changed", "d2"): 0, ("changed", "d4"): 0}  # fmt: skip
    assert [(r["mode"], r["doc_id"]) for r in top_ranked][:4] == [
        ("og", "d1"),
        ("og", "d2"),
        ("og", "d4"),
        ("og", "x1"),
    ]
    assert len(top_ranked) == 8


def test_a_training_pair_is_a_query_with_a_relevant_and_a_non_relevant_document() -> None:
    pair = item("balance", "training_pair", "f101", query_id="f101", query="q", instruction="n", positive="yes",
                negative="no", items={"positive": "doc-1", "negative": "doc-3"})  # fmt: skip
    rows = training_rows([pair], {})
    (query,) = rows.queries
    assert (query["mode"], query["query_id"], query["instruction"]) == ("train", "f101", "n")
    assert json.loads(query["meta"]) == {"item": pair.item_id, "positive": "doc-1", "negative": "doc-3"}
    assert [(d["doc_id"], d["text"], json.loads(d["meta"])) for d in rows.docs] == [
        ("f101_rel", "yes", {"item": "doc-1", "label": 1}), ("f101_nonrel", "no", {"item": "doc-3", "label": 0}),
    ]  # fmt: skip
    assert [(r["doc_id"], r["score"]) for r in rows.qrels] == [("f101_rel", 1), ("f101_nonrel", 0)]
