"""IFIR releases to files, in IFIR's public layout (as ``songtingyu/IFIR``): per subset a folder with
``<subset>-corpus.jsonl``, ``<subset>-query.jsonl``, ``<subset>-qrel.tsv`` (the originally relevant pairs) and
``test_data.json``, where each query lists its originally relevant passages and, per instruction level, the
indices of those that level still keeps. Ids are the seed ids, since each subset has its own folder.

Everything is rebuilt from the release rows: one query per (subset, seed query, level), sharing its id across
the levels, whose meta names its seed id and its originally relevant passages; each level's qrels are the
passages still relevant under that level's instruction. A level's entry carries the item that wrote it, so a
re-import keeps the lineage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ifsynth.schemas.errors import WarehouseError
from ifsynth.schemas.ifir import LEVELS, SINGLE_LEVEL, TEST_DATA, level_of
from ifsynth.warehouse.cards import CardFacts
from ifsynth.warehouse.export import Release, Written, write_jsonl, write_text, write_tsv


def card(_: dict[str, Any]) -> CardFacts:
    return CardFacts(license_name="ifir-source-collections", license_link="https://github.com/SighingSnow/IFIR")


def write(release: Release, out: Path) -> Written:
    """One folder per subset of the release, each file sorted by seed id, so identical releases give identical
    bytes."""
    corpora = _corpora(release.docs)
    tests = _query_rows(release.docs, release.queries, release.qrels)
    written: list[Path] = []
    left_out = [
        f"subset {subset}: no query of it survived the run's filters" for subset in sorted(corpora - tests.keys())
    ]
    for subset in sorted(tests):
        folder, rows = out / subset, tests.get(subset, [])
        written += [
            write_jsonl(folder / f"{subset}-corpus.jsonl", corpora.get(subset, [])),
            write_jsonl(folder / f"{subset}-query.jsonl", (query for row in rows for query in _beir_queries(row))),
            write_tsv(folder / f"{subset}-qrel.tsv", (judged for row in rows for judged in _beir_qrels(row))),
            write_text(folder / TEST_DATA, json.dumps(rows, indent=1, ensure_ascii=False) + "\n"),
        ]
    return Written(written, left_out=left_out, notes=_missing_levels(tests))


def _beir_queries(row: dict[str, Any]) -> list[dict[str, str]]:
    """IFIR's BEIR scripts read a query's level from its id's last ``_<level>`` (0: no instruction) and retrieve
    with the query and the level's instruction joined by a space."""
    plain = {"_id": f"{row['_id']}_0", "text": row["text"]}
    levels = [
        {"_id": f"{row['_id']}_{i['level']}", "text": f"{row['text']} {i['instruction']}"} for i in row["instructions"]
    ]
    return [plain, *levels]


def _beir_qrels(row: dict[str, Any]) -> list[tuple[str, str, int]]:
    """Level 0's are the originally relevant passages; a level's, those still relevant under its instruction."""
    plain = [(f"{row['_id']}_0", passage["_id"], 1) for passage in row["corpus"]]
    kept = [
        (f"{row['_id']}_{i['level']}", row["corpus"][index]["_id"], 1)
        for i in row["instructions"]
        for index in i["rel"]
    ]
    return [*plain, *kept]


def _missing_levels(tests: dict[str, list[dict[str, Any]]]) -> list[str]:
    """IFIR's ``src/eval.py`` averages every level 1-3 of a reasoning subset unguarded, so a subset lacking one
    divides by zero there: the script's own bug, which the export can only name."""
    notes = []
    for subset, rows in sorted(tests.items()):
        present = {i["level"] for row in rows for i in row["instructions"]}
        absent = sorted(set(LEVELS) - present)
        if absent and subset not in SINGLE_LEVEL:
            notes.append(
                f"Subset {subset} has no query at level {', '.join(map(str, absent))}: IFIR's src/eval.py divides by "
                "zero averaging an empty level (its `get_level`); evaluate it with `ifsynth evaluate`, or skip "
                'those levels in eval.py\'s `results["level"]`.'
            )
    return notes


def _passage(doc: dict[str, Any]) -> dict[str, str]:
    return {"_id": json.loads(doc["meta"])["seed_doc_id"], "title": doc["title"], "text": doc["text"]}


def _corpora(docs: list[dict]) -> dict[str, list[dict[str, str]]]:
    """Each subset's passages under their seed ids."""
    corpora: dict[str, list[dict[str, str]]] = {}
    for doc in docs:
        corpora.setdefault(json.loads(doc["meta"])["subset"], []).append(_passage(doc))
    return {subset: sorted(rows, key=lambda p: p["_id"]) for subset, rows in corpora.items()}


def _query_rows(docs: list[dict], queries: list[dict], qrels: list[dict]) -> dict[str, list[dict[str, Any]]]:
    """Per subset, ``test_data.json``'s rows: a query, its originally relevant passages in seed order, and per
    level present (ascending) the instruction with the indices of the passages still relevant under it."""
    passages = {doc["doc_id"]: doc for doc in docs}
    kept: dict[tuple[str, str], set[str]] = {}
    for r in qrels:
        if r["score"] > 0:
            kept.setdefault((r["mode"], r["query_id"]), set()).add(r["doc_id"])
    levels: dict[str, list[dict]] = {}
    for q in sorted(queries, key=lambda q: level_of(q["mode"])):
        levels.setdefault(q["query_id"], []).append(q)
    tests: dict[str, list[dict[str, Any]]] = {}
    for rows in levels.values():
        meta = json.loads(rows[0]["meta"])
        absent = [doc_id for doc_id in meta["relevant"] if doc_id not in passages]
        if absent:
            raise WarehouseError(f"release query {rows[0]['query_id']} names passages not in the corpus: {absent}")
        tests.setdefault(meta["subset"], []).append(
            {
                "_id": meta["seed_query_id"],
                "text": rows[0]["query"],
                "corpus": [_passage(passages[doc_id]) for doc_id in meta["relevant"]],
                "instructions": [_instruction(q, meta["relevant"], kept) for q in rows],
            }
        )
    return {subset: sorted(rows, key=lambda row: row["_id"]) for subset, rows in tests.items()}


def _instruction(query: dict[str, Any], relevant: list[str], kept: dict[tuple[str, str], set[str]]) -> dict[str, Any]:
    still = kept.get((query["mode"], query["query_id"]), set())
    if still - set(relevant):
        raise WarehouseError(
            f"release query {query['query_id']} ({query['mode']}) has relevant passages outside its original ones"
        )
    meta = json.loads(query["meta"])
    entry = {
        "instruction": query["instruction"],
        "level": level_of(query["mode"]),
        "rel": [index for index, doc_id in enumerate(relevant) if doc_id in still],
    }
    return entry | ({"item": meta["item"]} if "item" in meta else {})
