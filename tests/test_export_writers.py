"""The recipes' writers on hand-made releases (no run, no DuckDB): what the harnesses that read the files need."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from huggingface_hub import DatasetCard

from ifsynth.flows.recipes.ifir import export as ifir
from ifsynth.flows.recipes.infir import export as infir
from ifsynth.flows.recipes.infosearch import export as infosearch
from ifsynth.warehouse import cards
from ifsynth.warehouse.export import Release


def release(
    recipe: str, docs: list[dict[str, Any]], queries: list[dict[str, Any]], qrels: list[dict[str, Any]], **card: Any
) -> Release:
    def rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {"title": "", "group_id": "", "query": "", "instruction": "", **r, "meta": json.dumps(r.get("meta", {}))}
            for r in items
        ]

    return Release("r", recipe, None, {"recipe": recipe, **card}, rows(docs), rows(queries), qrels, [])


def test_infir_rows_carry_what_both_branches_of_inf_embeds_loader_read(tmp_path: Path) -> None:
    # night-chen/InF_Embed dataloaders/basic_dataloader.py, MSMarcoDataLoader: `document` on its default branch,
    # `document_positive` on the other, and these on both
    read = {
        "query_positive",
        "instruction_positive",
        "instruction_negative",
        "query_negative",
        "hard_negative_document_1",
        "hard_negative_document_2",
    }
    items = {name: f"{name}-item" for name in infir.ITEM_COLUMNS}
    meta = {"origin_query_id": "q", "origin_doc_id": "d", "tuple_item": "t", "items": items}
    docs = [{"doc_id": mode, "text": f"{mode} text", "meta": {"tuple": "t1", "role": mode}} for mode in infir.MODES]
    queries = [
        {"query_id": "t1", "mode": mode, "query": f"Q {mode}", "instruction": f"I {mode}", "meta": meta}
        for mode in infir.MODES
    ]
    made = release("infir", docs, queries, [])
    infir.write_tuples(made, tmp_path / "flat")
    infir.write_hf(made, tmp_path / "hf")
    for table in (
        pq.read_table(tmp_path / "flat" / "infir.parquet"),
        pq.read_table(next((tmp_path / "hf" / "infir").glob("*.parquet"))),
    ):
        row = table.to_pylist()[0]
        assert read | {"document", "document_positive"} <= set(row)
        assert row["document"] == row["document_positive"] == "positive text"


def test_an_infosearch_dimension_with_no_survivor_is_left_out_and_said(tmp_path: Path) -> None:
    docs = [{"doc_id": "d1", "text": "x", "meta": {"dimension": "format"}}]
    queries = [
        {"query_id": "q1", "mode": mode, "meta": {"dimension": "format"}} for mode in ("og", "changed", "reversed")
    ]
    qrels = [{"query_id": "q1", "doc_id": "d1", "score": 1, "mode": mode} for mode in ("og", "changed", "reversed")]
    written = infosearch.write(
        release("infosearch", docs, queries, qrels, params={"dimensions": ["format", "audience"]}), tmp_path
    )
    assert not (tmp_path / "audience").exists()
    assert (tmp_path / "format" / "corpus.jsonl").exists()
    assert written.left_out == ["dimension audience: no core query of it survived the run's filters"]


def test_ifir_ids_carry_the_level_its_beir_scripts_read_and_configs_are_not_doubled(tmp_path: Path) -> None:
    docs = [{"doc_id": f"x{n}", "text": f"p{n}", "meta": {"seed_doc_id": f"p{n}", "subset": "aila"}} for n in (1, 2)]
    meta = {"subset": "aila", "seed_query_id": "AILA_Q1", "relevant": ["x1", "x2"]}
    queries = [{"query_id": "a1", "mode": "level1", "query": "facts", "instruction": "only statutes", "meta": meta}]
    qrels = [{"query_id": "a1", "doc_id": "x2", "score": 1, "mode": "level1"}]
    written = ifir.write(release("ifir", docs, queries, qrels), tmp_path)
    ids = [json.loads(line)["_id"] for line in (tmp_path / "aila" / "aila-query.jsonl").read_text().splitlines()]
    assert ids == ["AILA_Q1_0", "AILA_Q1_1"]  # eval_lexical.split_queries: level = id[id.rfind('_') + 1]
    judged = (tmp_path / "aila" / "aila-qrel.tsv").read_text().splitlines()[1:]
    assert judged == ["AILA_Q1_0\tp1\t1", "AILA_Q1_0\tp2\t1", "AILA_Q1_1\tp2\t1"]
    assert any("level 2, 3" in note and "eval.py" in note for note in written.notes)
    files = [path.relative_to(tmp_path).as_posix() for path in written.files]
    names = [config["config_name"] for config in cards.configs_for(files, training=False)[0]]
    assert "aila-corpus" in names and not any("aila-aila" in name for name in names)


def test_cards_name_the_seed_license_and_the_content_datasets_caches_by() -> None:
    configs = [{"config_name": "corpus", "data_files": [{"split": "test", "path": "corpus.jsonl"}]}]
    facts = cards.CardFacts(license_name="ms-marco", license_link="https://microsoft.github.io/msmarco/")
    made = [
        DatasetCard(cards.render({"recipe": "x"}, facts=facts, configs=configs, run_id=None, queries=1, content=c))
        for c in ("sha256:aa", "sha256:bb")
    ]
    data = [card.data.to_dict() for card in made]
    assert data[0]["license"] == "other"
    assert (data[0]["license_name"], data[0]["license_link"]) == (facts.license_name, facts.license_link)
    # datasets' cache of a local folder hashes the configs: releases with other files must differ there
    assert data[0]["configs"][0]["description"] != data[1]["configs"][0]["description"]
    assert configs[0].get("description") is None  # the writer's configs are not changed in place
