"""Assembly's halves on plain values: every input passes, rows are numbered within their group, InF-IR's
tuples take the three-mode layout, and noise is drawn only from passages no row used."""

from __future__ import annotations

import json
from typing import Any

from ifsynth.flows.stages.assemble import AssembleRelease, Rows, add_noise, add_page, infir_tuple, instructir_instance
from ifsynth.schemas.infir import MODES
from ifsynth.schemas.records import ItemRecord
from ifsynth.schemas.seeds import SeedPassage
from tests.helpers import at, env, item


def rewrite(group: str, ord: int, instruction: str) -> ItemRecord:
    return item(
        "rewrite", "rewrite", group, ord, query_id=group, doc_id=f"p{group}", query=f"what is {group}",
        instruction=instruction, passage=f"{group} for {instruction}", original_passage="P+",
    )  # fmt: skip


def test_every_surviving_item_passes_and_counts_once() -> None:
    page = [rewrite("q1", 1, "a"), rewrite("q2", 1, "b")]
    decided = list(AssembleRelease(max_noise=None).decide(at(env(), "assemble"), page))
    assert [(input_id, o.decision, o.n_out) for input_id, o in decided] == [(i.item_id, "pass", 1) for i in page]


def test_instances_are_numbered_within_their_query_as_the_release_names_them() -> None:
    rows = Rows()
    add_page(rows, [rewrite("q1", 1, "a"), rewrite("q1", 3, "c"), rewrite("q2", 2, "b")], instructir_instance)
    assert [q["query_id"] for q in rows.queries] == ["q1_1", "q1_2", "q2_1"]
    assert [d["doc_id"] for d in rows.docs] == ["pq1_1", "pq1_2", "pq2_1"] and rows.used == {"pq1", "pq2"}
    assert rows.queries[1]["instruction"] == "c" and rows.docs[1]["text"] == "q1 for c" and rows.docs[1]["title"] == ""
    assert json.loads(rows.docs[0]["meta"]) == {"item": "rewrite-rewrite-q1-1", "origin_query_id": "q1",
                                                "origin_doc_id": "pq1"}  # fmt: skip
    assert rows.qrels[2] == {"mode": "instructed", "query_id": "q2_1", "doc_id": "pq2_1", "score": 1}


TEXTS: dict[str, Any] = {
    "query_positive": "qp", "instruction_positive": "ip", "document_positive": "P+", "query_negative": "q-",
    "instruction_negative": "i-", "hard_negative_document_1": "P1-", "hard_negative_document_2": "P2-",
}  # fmt: skip
ITEMS = {"instruction_positive": "i1", "instruction_negative": "i2", "query_negative": "q2",
         "hard_negative_document_1": "n1", "hard_negative_document_2": "n2"}  # fmt: skip


def test_a_tuple_is_three_queries_and_three_passages_each_relevant_in_one_mode() -> None:
    rows = Rows()
    tuple_ = item("tuples", "tuple", "q1", query_id="q1", doc_id="d1", items=ITEMS, language="Rust", **TEXTS)
    add_page(rows, [tuple_], infir_tuple)
    assert [d["doc_id"] for d in rows.docs] == ["q1_pos", "q1_neg1", "q1_neg2"] and rows.used == {"d1"}
    assert [d["text"] for d in rows.docs] == ["P+", "P1-", "P2-"]
    assert json.loads(rows.docs[1]["meta"]) == {"role": "negative_instruction", "tuple": "q1", "item": "n1"}
    assert [(q["mode"], q["query"], q["instruction"]) for q in rows.queries] == [
        ("positive", "qp", "ip"), ("negative_instruction", "qp", "i-"), ("negative_query", "q-", "ip"),
    ]  # fmt: skip
    assert json.loads(rows.queries[0]["meta"])["language"] == "Rust"
    relevant = {(r["mode"], r["doc_id"]) for r in rows.qrels if r["score"]}
    assert len(rows.qrels) == 9 and relevant == {("positive", "q1_pos"), ("negative_instruction", "q1_neg1"),
                                                 ("negative_query", "q1_neg2")}  # fmt: skip
    assert set(MODES) == {q["mode"] for q in rows.queries}


def test_a_tuple_without_a_language_names_none() -> None:
    rows = Rows()
    add_page(rows, [item("tuples", "tuple", "q1", query_id="q1", doc_id="d1", items=ITEMS, **TEXTS)],
             infir_tuple)  # fmt: skip
    assert all("language" not in json.loads(q["meta"]) for q in rows.queries)


def test_noise_is_drawn_from_unused_passages_only_and_listed_by_id() -> None:
    passages = [SeedPassage(doc_id=f"n{i}", text=f"noise {i}") for i in range(9, -1, -1)]
    rows = Rows(used={"n3"})
    assert add_noise(rows, passages, None, seed=0) == 9
    assert [d["doc_id"] for d in rows.docs] == [f"n{i}" for i in range(10) if i != 3]
    assert all(json.loads(d["meta"]) == {"noise": True} for d in rows.docs)
    capped, again = Rows(used={"n3"}), Rows(used={"n3"})
    assert add_noise(capped, passages, 4, seed=0) == 4 == add_noise(again, reversed(passages), 4, seed=0)
    assert capped.docs == again.docs and "n3" not in {d["doc_id"] for d in capped.docs}
